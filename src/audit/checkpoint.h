// Signed checkpoints of the audit trail, and the checks that catch a trail
// cut short or rewound. Pure: no clock, no files (the checkpointer in
// runtime/ writes them), keys passed in.
//
// Why: the hash chain alone proves only that what is there was not edited.
// Anyone who can write to the database can delete the newest rows of a
// chain and set its head back, and the shorter chain still verifies. A
// checkpoint is the state of the trail at one moment — the global sequence
// number and every chain's head — signed with an Ed25519 key that lives
// outside the database and appended to a file outside it. A trail (the
// store, or an export) that no longer reaches a checkpoint it should was
// cut or rewound.
//
// Each chain's head is signed on its own, so a tenant's export carries its
// own chain's signed head and nobody else's, and anyone holding the public
// key verifies it offline. An HMAC-keyed chain would have needed the secret
// to verify, which tenants must never hold.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "audit/chain.h"
#include "common/result.h"

namespace atrium::audit {

struct HeadState {
  std::string chain;
  int64_t chain_seq = 0;
  std::string hash;
};

// The trail's state at one moment: what Store::AuditState reads in one
// transaction. heads are sorted by chain.
struct TrailState {
  int64_t last_seq = 0;
  std::vector<HeadState> heads;
};

struct SignedHead {
  HeadState head;
  std::string signature;  // hex, Ed25519 over CheckpointMessage
};

struct Checkpoint {
  int64_t time = 0;        // unix ms when it was taken
  int64_t last_seq = 0;    // the global sequence number then
  std::string public_key;  // hex, of the key that signed it
  std::vector<SignedHead> heads;
};

// The bytes signed for one chain's head: a JSON array naming the format,
// so a signature over anything else never verifies as a checkpoint.
std::string CheckpointMessage(int64_t time, int64_t last_seq, const HeadState& head);

// Signs every head of `state`. Errors: kInvalidArgument for a secret key
// that is not a 64-byte Ed25519 key.
Result<Checkpoint> SignCheckpoint(const TrailState& state, int64_t time,
                                  std::string_view secret_key);

// Checks every head's signature against `public_key_hex` (the key the
// verifier trusts, not the one the checkpoint names). Errors:
// kInvalidArgument naming the first chain that does not verify.
Status VerifyCheckpointSignatures(const Checkpoint& checkpoint, const std::string& public_key_hex);

// The checkpoint as one tenant may see it: only its own chain's head.
Checkpoint OnlyChain(const Checkpoint& checkpoint, const std::string& chain);

nlohmann::json CheckpointToJson(const Checkpoint& checkpoint);
Result<Checkpoint> CheckpointFromJson(const nlohmann::json& j);

// The last checkpoint of an anchor file (one CheckpointToJson a line). A
// malformed last line is a write cut short by a crash and is skipped; a
// malformed line before it is kInvalidArgument naming it. nullopt: none yet.
Result<std::optional<Checkpoint>> LatestCheckpointIn(const std::string& jsonl);

// What a verifier knows about the trail besides its records.
struct TrailClaims {
  // Each chain's recorded head: every chain in the records ends exactly
  // there, and every head's chain is present. nullopt: not checked.
  std::optional<std::vector<HeadState>> heads;
  // The whole trail's last global sequence number: the records must be
  // exactly seq 1..last_seq, without a gap. nullopt: a tenant's chain,
  // which holds only some of the global numbers.
  std::optional<int64_t> last_seq;
  // A checkpoint whose signatures the caller has already verified: every
  // chain it names must still reach its signed head with the same hash,
  // and a whole trail must reach its last_seq.
  const Checkpoint* checkpoint = nullptr;
};

// Verify (every link, every chain from #1), then the claims. The first
// problem found is reported.
VerifyReport VerifyTrail(std::vector<AuditRecord> records, const TrailClaims& claims);

}  // namespace atrium::audit

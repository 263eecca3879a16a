// Signs the audit trail's state now and then and anchors it outside the
// database (see audit/checkpoint.h for why).
//
// Every interval, if the trail moved, it reads the global sequence number and
// every chain's head in one transaction (Store::AuditState), checks that the
// trail still reaches the previous checkpoint, signs the new state with an
// Ed25519 key kept in a file (mode 0600, created on first start) and appends
// it as one line to the checkpoint file, fsynced, and logs its digest.
//
// A trail that no longer reaches the last checkpoint — rows deleted and the
// heads set back, or a chain rewritten — is never signed over: Start refuses
// to run the control plane, and a running checkpointer stops signing and
// logs an error each round until an operator looks.
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include "audit/checkpoint.h"
#include "common/clock.h"
#include "common/result.h"
#include "store/audit_state.h"
#include "store/store.h"
#include "threads/periodic_thread.h"

namespace atrium {

struct AuditCheckpointOptions {
  // Append-only JSON Lines, one signed checkpoint a line.
  std::string checkpoint_file;
  // The Ed25519 secret key, hex. Its public half is written beside it as
  // <signing_key_file>.pub (hex) for verifiers.
  std::string signing_key_file;
  // 0: no timer (tests call CheckpointNow).
  int64_t interval_ms = 60'000;
};

class AuditCheckpointer {
 public:
  AuditCheckpointer(Store& store, const Clock& clock, AuditCheckpointOptions options);
  ~AuditCheckpointer();
  AuditCheckpointer(const AuditCheckpointer&) = delete;
  AuditCheckpointer& operator=(const AuditCheckpointer&) = delete;

  // Loads or creates the key, reads the checkpoint file's last checkpoint,
  // checks the store still reaches it, takes a checkpoint and starts the
  // timer. Errors: kFailedPrecondition when the store no longer reaches the
  // last checkpoint (cut or rewound); kUnavailable / kInvalidArgument for
  // an unreadable or malformed key or checkpoint file.
  Status Start();
  // Stops the timer and, if Start succeeded, takes a last checkpoint (the
  // store must still be open); idempotent.
  void Stop();

  // Takes a checkpoint if the trail moved since the last one. Errors:
  // kFailedPrecondition when the trail no longer reaches the last one (and
  // nothing is signed); kUnavailable when the file cannot be written.
  Status CheckpointNow();

  // The last checkpoint taken or read; nullopt before the first.
  std::optional<audit::Checkpoint> Latest() const;
  // Hex; valid after Start.
  std::string public_key_hex() const;

 private:
  Status LoadOrCreateKey();
  Status ReadLastCheckpoint();
  Status CheckReaches(const audit::TrailState& state, const audit::Checkpoint& previous);
  Status Append(const audit::Checkpoint& checkpoint);

  Store& store_;
  const Clock& clock_;
  const AuditCheckpointOptions options_;
  std::string secret_key_;  // raw, 64 bytes; set once by Start

  mutable std::mutex mu_;
  std::optional<audit::Checkpoint> latest_;  // guarded by mu_
  std::mutex round_mu_;                      // one round at a time (timer vs. callers)

  std::mutex stop_mu_;
  bool stopped_ = false;  // guarded by stop_mu_
  bool started_ = false;  // set by Start before the timer runs
  PeriodicThread timer_;  // CheckpointNow every options_.interval_ms
};

}  // namespace atrium

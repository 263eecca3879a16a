#include "audit/checkpoint.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "crypto/crypto.h"

namespace atrium::audit {
namespace {
constexpr char kCheckpointFormat[] = "atrium.audit.checkpoint.v1";
}

std::string CheckpointMessage(int64_t time, int64_t last_seq, const HeadState& head) {
  return nlohmann::json::array(
             {kCheckpointFormat, time, last_seq, head.chain, head.chain_seq, head.hash})
      .dump();
}

Result<Checkpoint> SignCheckpoint(const TrailState& state, int64_t time,
                                  std::string_view secret_key) {
  std::string public_key = crypto::PublicKeyOf(secret_key);
  if (public_key.empty()) return Error::InvalidArgument("not an Ed25519 secret key");
  Checkpoint checkpoint;
  checkpoint.time = time;
  checkpoint.last_seq = state.last_seq;
  checkpoint.public_key = crypto::HexEncode(public_key);
  for (const auto& head : state.heads) {
    ATRIUM_ASSIGN_OR_RETURN(
        std::string signature,
        crypto::SignDetached(secret_key, CheckpointMessage(time, state.last_seq, head)));
    checkpoint.heads.push_back({head, crypto::HexEncode(signature)});
  }
  return checkpoint;
}

Status VerifyCheckpointSignatures(const Checkpoint& checkpoint, const std::string& public_key_hex) {
  std::string public_key;
  if (!crypto::HexDecode(public_key_hex, public_key) || public_key.size() != 32) {
    return Error::InvalidArgument("the public key must be 64 hex digits (Ed25519)");
  }
  for (const auto& signed_head : checkpoint.heads) {
    std::string signature;
    if (!crypto::HexDecode(signed_head.signature, signature) ||
        !crypto::VerifyDetached(
            public_key, CheckpointMessage(checkpoint.time, checkpoint.last_seq, signed_head.head),
            signature)) {
      return Error::InvalidArgument("the checkpoint's signature of chain " +
                                    signed_head.head.chain + " does not verify with key " +
                                    public_key_hex);
    }
  }
  return OkStatus();
}

Checkpoint OnlyChain(const Checkpoint& checkpoint, const std::string& chain) {
  Checkpoint only = checkpoint;
  only.heads.clear();
  for (const auto& h : checkpoint.heads) {
    if (h.head.chain == chain) only.heads.push_back(h);
  }
  return only;
}

nlohmann::json CheckpointToJson(const Checkpoint& c) {
  nlohmann::json heads = nlohmann::json::array();
  for (const auto& h : c.heads) {
    heads.push_back({{"chain", h.head.chain},
                     {"chain_seq", h.head.chain_seq},
                     {"hash", h.head.hash},
                     {"signature", h.signature}});
  }
  return {{"time", c.time},
          {"last_seq", c.last_seq},
          {"public_key", c.public_key},
          {"heads", std::move(heads)}};
}

Result<Checkpoint> CheckpointFromJson(const nlohmann::json& j) {
  auto bad = [] { return Error::InvalidArgument("malformed audit checkpoint"); };
  if (!j.is_object()) return bad();
  Checkpoint c;
  auto num = [](const nlohmann::json& o, const char* k, int64_t& out) {
    auto it = o.find(k);
    if (it == o.end() || !it->is_number_integer()) return false;
    out = it->get<int64_t>();
    return true;
  };
  auto str = [](const nlohmann::json& o, const char* k, std::string& out) {
    auto it = o.find(k);
    if (it == o.end() || !it->is_string()) return false;
    out = it->get<std::string>();
    return true;
  };
  auto heads = j.find("heads");
  if (!num(j, "time", c.time) || !num(j, "last_seq", c.last_seq) ||
      !str(j, "public_key", c.public_key) || heads == j.end() || !heads->is_array()) {
    return bad();
  }
  for (const auto& h : *heads) {
    SignedHead s;
    if (!h.is_object() || !str(h, "chain", s.head.chain) ||
        !num(h, "chain_seq", s.head.chain_seq) || !str(h, "hash", s.head.hash) ||
        !str(h, "signature", s.signature)) {
      return bad();
    }
    c.heads.push_back(std::move(s));
  }
  return c;
}

Result<std::optional<Checkpoint>> LatestCheckpointIn(const std::string& jsonl) {
  std::vector<std::pair<int, std::string>> lines;
  std::istringstream in(jsonl);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.emplace_back(number, line);
  }
  std::optional<Checkpoint> latest;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto json = nlohmann::json::parse(lines[i].second, nullptr, /*allow_exceptions=*/false);
    auto checkpoint = CheckpointFromJson(json);
    if (!checkpoint.has_value()) {
      if (i + 1 == lines.size()) break;  // torn by a crash mid-write
      return Error::InvalidArgument("checkpoint file line " + std::to_string(lines[i].first) +
                                    ": " + checkpoint.error().message);
    }
    latest = std::move(checkpoint).value();
  }
  return latest;
}

VerifyReport VerifyTrail(std::vector<AuditRecord> records, const TrailClaims& claims) {
  std::sort(records.begin(), records.end(),
            [](const AuditRecord& a, const AuditRecord& b) { return a.seq < b.seq; });
  // Each chain's records by chain_seq, and its last, before Verify takes them.
  std::map<std::string, std::map<int64_t, AuditRecord>> chains;
  for (const auto& r : records) chains[r.chain][r.chain_seq] = r;
  std::vector<int64_t> seqs;
  seqs.reserve(records.size());
  for (const auto& r : records) seqs.push_back(r.seq);

  VerifyReport report = Verify(std::move(records));
  if (!report.ok) return report;

  auto broken = [&](const std::string& chain, std::string reason) {
    report.ok = false;
    report.broken_chain = chain;
    auto it = chains.find(chain);
    if (it != chains.end() && !it->second.empty()) {
      report.broken_seq = it->second.rbegin()->second.seq;
      report.broken_chain_seq = it->second.rbegin()->first;
    }
    report.reason = std::move(reason);
    return report;
  };
  auto end_of = [&](const std::string& chain) -> int64_t {
    auto it = chains.find(chain);
    return it == chains.end() || it->second.empty() ? 0 : it->second.rbegin()->first;
  };

  if (claims.last_seq) {
    // Verify already refused duplicates; sorted, seq i must be i + 1.
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i] != static_cast<int64_t>(i) + 1) {
        report.ok = false;
        report.broken_seq = seqs[i];
        report.reason = "gap in the global sequence: records " + std::to_string(i + 1) + ".." +
                        std::to_string(seqs[i] - 1) + " are missing";
        return report;
      }
    }
    int64_t have = static_cast<int64_t>(seqs.size());
    if (have != *claims.last_seq) {
      report.ok = false;
      report.broken_seq = have;
      report.reason = "the trail ends at seq " + std::to_string(have) +
                      " but the sequence counter is at " + std::to_string(*claims.last_seq) +
                      (have < *claims.last_seq ? ": records removed from the tail"
                                               : ": records beyond the counter");
      return report;
    }
  }

  if (claims.heads) {
    std::map<std::string, bool> has_head;
    for (const auto& head : *claims.heads) {
      has_head[head.chain] = true;
      int64_t have = end_of(head.chain);
      if (have != head.chain_seq) {
        return broken(head.chain, "the chain ends at #" + std::to_string(have) +
                                      " but its recorded head is #" +
                                      std::to_string(head.chain_seq) +
                                      (have < head.chain_seq ? ": records removed from the tail"
                                                             : ": records beyond the head"));
      }
      if (have > 0 && chains[head.chain].rbegin()->second.hash != head.hash) {
        return broken(head.chain, "the last record's hash differs from the chain's recorded head");
      }
    }
    for (const auto& [chain, by_seq] : chains) {
      if (!has_head.count(chain)) return broken(chain, "the chain has no recorded head");
    }
  }

  if (claims.checkpoint) {
    const Checkpoint& cp = *claims.checkpoint;
    for (const auto& signed_head : cp.heads) {
      const HeadState& head = signed_head.head;
      if (head.chain_seq <= 0) continue;
      int64_t have = end_of(head.chain);
      if (have < head.chain_seq) {
        return broken(head.chain, "the chain ends at #" + std::to_string(have) +
                                      " but the signed checkpoint of seq " +
                                      std::to_string(cp.last_seq) + " saw it at #" +
                                      std::to_string(head.chain_seq) +
                                      ": records removed or the chain rewound");
      }
      const AuditRecord& there = chains[head.chain].at(head.chain_seq);
      if (there.hash != head.hash) {
        report.ok = false;
        report.broken_seq = there.seq;
        report.broken_chain = head.chain;
        report.broken_chain_seq = head.chain_seq;
        report.reason = "the record differs from the one the signed checkpoint of seq " +
                        std::to_string(cp.last_seq) + " saw: the chain was rewritten";
        return report;
      }
    }
    if (claims.last_seq && *claims.last_seq < cp.last_seq) {
      report.ok = false;
      report.broken_seq = *claims.last_seq;
      report.reason = "the trail ends at seq " + std::to_string(*claims.last_seq) +
                      " but the signed checkpoint saw seq " + std::to_string(cp.last_seq) +
                      ": records removed or the counter rewound";
      return report;
    }
  }
  return report;
}

}  // namespace atrium::audit

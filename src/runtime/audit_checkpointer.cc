#include "runtime/audit_checkpointer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "crypto/crypto.h"
#include "identity/signing_key_box.h"

namespace atrium {
namespace {

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::Unavailable("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Creates `path` with `mode` and writes text; refuses to replace a file.
Status CreateFileWith(const std::string& path, const std::string& text, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return Error::Unavailable("cannot create " + path);
  ::fchmod(fd, mode);
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ::fsync(fd) == 0 && ok;
  ok = ::close(fd) == 0 && ok;
  if (!ok) return Error::Unavailable("cannot write " + path);
  return OkStatus();
}

}  // namespace

AuditCheckpointer::AuditCheckpointer(Store& store, const Clock& clock,
                                     AuditCheckpointOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      timer_("audit-ckpt", options_.interval_ms, [this] {
        if (auto taken = CheckpointNow(); !taken.has_value()) {
          spdlog::error("audit checkpoint: {}", taken.error().message);
        }
      }) {}

AuditCheckpointer::~AuditCheckpointer() { Stop(); }

Status AuditCheckpointer::LoadOrCreateKey() {
  const std::string& path = options_.signing_key_file;
  ATRIUM_ASSIGN_OR_RETURN(std::string raw,
                          LoadOrCreateKeyFile(path, crypto::kSigningSecretKeyBytes, [] {
                            return crypto::GenerateSigningKeyPair().secret_key;
                          }));
  if (crypto::PublicKeyOf(raw).empty()) {
    return Error::InvalidArgument(path + " does not hold an Ed25519 secret key (128 hex digits)");
  }
  secret_key_ = std::move(raw);
  std::error_code ec;
  // The public half beside it, for verifiers; rewritten if it went missing.
  std::string pub_path = path + ".pub";
  if (!std::filesystem::exists(pub_path, ec)) {
    ATRIUM_RETURN_IF_ERROR(
        CreateFileWith(pub_path, crypto::HexEncode(crypto::PublicKeyOf(secret_key_)) + "\n", 0644));
  }
  return OkStatus();
}

Status AuditCheckpointer::ReadLastCheckpoint() {
  const std::string& path = options_.checkpoint_file;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return OkStatus();
  ATRIUM_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  // A line torn by a crash mid-append is cut off, so the next append starts
  // on a line of its own.
  size_t end = text.rfind('\n');
  size_t whole = end == std::string::npos ? 0 : end + 1;
  if (whole != text.size()) {
    spdlog::warn("{}: dropping a checkpoint line cut short by a crash", path);
    if (::truncate(path.c_str(), static_cast<off_t>(whole)) != 0) {
      return Error::Unavailable("cannot repair " + path);
    }
    text.resize(whole);
  }
  ATRIUM_ASSIGN_OR_RETURN(auto latest, audit::LatestCheckpointIn(text));
  if (!latest) return OkStatus();
  std::string own = public_key_hex();
  if (auto verified = audit::VerifyCheckpointSignatures(*latest, own); !verified.has_value()) {
    return Error::FailedPrecondition(path + ": the last checkpoint was not signed by " +
                                     options_.signing_key_file + ": " + verified.error().message);
  }
  std::lock_guard lock(mu_);
  latest_ = std::move(latest);
  return OkStatus();
}

Status AuditCheckpointer::CheckReaches(const audit::TrailState& state,
                                       const audit::Checkpoint& previous) {
  auto rewound = [&](const std::string& what) {
    return Error::FailedPrecondition(
        "the audit trail no longer reaches the checkpoint of seq " +
        std::to_string(previous.last_seq) + " in " + options_.checkpoint_file + ": " + what +
        ". Records were removed or rewritten behind the server; compare the trail with the "
        "checkpoint (atrium audit verify --store ... --checkpoints ...) before going on");
  };
  if (state.last_seq < previous.last_seq) {
    return rewound("the sequence counter is at " + std::to_string(state.last_seq));
  }
  std::map<std::string, const audit::HeadState*> now;
  for (const auto& head : state.heads) now[head.chain] = &head;
  for (const auto& signed_head : previous.heads) {
    const audit::HeadState& was = signed_head.head;
    auto it = now.find(was.chain);
    int64_t have = it == now.end() ? 0 : it->second->chain_seq;
    if (have < was.chain_seq) {
      return rewound("chain " + was.chain + " is at #" + std::to_string(have) + ", was #" +
                     std::to_string(was.chain_seq));
    }
    std::optional<std::string> hash;
    if (have == was.chain_seq) {
      hash = it->second->hash;
    } else {
      ATRIUM_ASSIGN_OR_RETURN(hash, ReadAuditHashAt(store_.database(), was.chain, was.chain_seq));
    }
    if (hash != was.hash) {
      return rewound("chain " + was.chain + "'s record #" + std::to_string(was.chain_seq) +
                     " is not the one signed");
    }
  }
  return OkStatus();
}

Status AuditCheckpointer::Append(const audit::Checkpoint& checkpoint) {
  std::string line = audit::CheckpointToJson(checkpoint).dump() + "\n";
  int fd =
      ::open(options_.checkpoint_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Error::Unavailable("cannot open " + options_.checkpoint_file);
  bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ok = ::fsync(fd) == 0 && ok;
  ok = ::close(fd) == 0 && ok;
  if (!ok) return Error::Unavailable("cannot append to " + options_.checkpoint_file);
  // A second anchor: the log line's digest matches the file's line.
  spdlog::info("audit checkpoint: seq {} over {} chains, sha256 {}", checkpoint.last_seq,
               checkpoint.heads.size(), crypto::Sha256Hex(line));
  return OkStatus();
}

Status AuditCheckpointer::CheckpointNow() {
  std::lock_guard round(round_mu_);
  ATRIUM_ASSIGN_OR_RETURN(audit::TrailState state, ReadAuditState(store_.database()));
  std::optional<audit::Checkpoint> previous = Latest();
  if (previous) {
    ATRIUM_RETURN_IF_ERROR(CheckReaches(state, *previous));
    if (previous->last_seq == state.last_seq) return OkStatus();  // nothing new to sign
  }
  ATRIUM_ASSIGN_OR_RETURN(audit::Checkpoint checkpoint,
                          audit::SignCheckpoint(state, clock_.NowMillis(), secret_key_));
  ATRIUM_RETURN_IF_ERROR(Append(checkpoint));
  std::lock_guard lock(mu_);
  latest_ = std::move(checkpoint);
  return OkStatus();
}

Status AuditCheckpointer::Start() {
  if (options_.checkpoint_file.empty() || options_.signing_key_file.empty()) {
    return Error::InvalidArgument("the audit checkpointer needs a checkpoint file and a key file");
  }
  ATRIUM_RETURN_IF_ERROR(LoadOrCreateKey());
  ATRIUM_RETURN_IF_ERROR(ReadLastCheckpoint());
  ATRIUM_RETURN_IF_ERROR(CheckpointNow());
  started_ = true;
  timer_.Start();
  return OkStatus();
}

void AuditCheckpointer::Stop() {
  {
    std::lock_guard lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  timer_.Stop();
  // A clean stop anchors the trail's final state.
  if (started_) {
    if (auto taken = CheckpointNow(); !taken.has_value()) {
      spdlog::error("audit checkpoint at stop: {}", taken.error().message);
    }
  }
}

std::optional<audit::Checkpoint> AuditCheckpointer::Latest() const {
  std::lock_guard lock(mu_);
  return latest_;
}

std::string AuditCheckpointer::public_key_hex() const {
  return crypto::HexEncode(crypto::PublicKeyOf(secret_key_));
}

}  // namespace atrium

#include "identity/signing_key_box.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/strings.h"
#include "crypto/crypto.h"

namespace atrium {

bool IsSealedSecret(const std::string& stored) { return StartsWith(stored, kSealedSecretPrefix); }

Result<std::string> SealSecret(const std::string& kek, const std::string& secret) {
  ATRIUM_ASSIGN_OR_RETURN(std::string sealed, crypto::SecretBoxSeal(kek, secret));
  return std::string(kSealedSecretPrefix) + crypto::Base64UrlEncode(sealed);
}

Result<std::string> OpenSealedSecret(const std::string& kek, const std::string& stored) {
  if (!IsSealedSecret(stored)) return Error::InvalidArgument("not a sealed secret");
  std::string sealed;
  if (!crypto::Base64UrlDecode(stored.substr(std::strlen(kSealedSecretPrefix)), sealed)) {
    return Error::InvalidArgument("a sealed secret is not base64url");
  }
  auto opened = crypto::SecretBoxOpen(kek, sealed);
  if (!opened.has_value()) {
    return Error::FailedPrecondition(
        "a signing key does not open with this key file: the store was sealed with another one");
  }
  return opened;
}

namespace {

Result<std::string> ReadKeyFile(const std::string& path, int fd, size_t key_bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Error::Unavailable("cannot stat " + path);
  if ((st.st_mode & 077) != 0) {
    return Error::FailedPrecondition(path + " may be read by other users: chmod 600 it");
  }
  std::string text(2 * key_bytes + 2, '\0');  // hex and a line end
  ssize_t n = ::read(fd, text.data(), text.size());
  if (n < 0) return Error::Unavailable("cannot read " + path);
  text.resize(static_cast<size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  std::string key;
  if (!crypto::HexDecode(text, key) || key.size() != key_bytes) {
    return Error::FailedPrecondition(path + " does not hold a " + std::to_string(key_bytes) +
                                     "-byte hex key");
  }
  return key;
}

}  // namespace

Result<std::string> LoadOrCreateKeyFile(const std::string& path, size_t key_bytes,
                                        const std::function<std::string()>& make_key) {
  // O_EXCL: of two servers starting at once, one creates and the other reads.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) {
    std::string line = crypto::HexEncode(make_key()) + "\n";
    bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    ok = ::fsync(fd) == 0 && ok;
    ::close(fd);
    if (!ok) {
      ::unlink(path.c_str());
      return Error::Unavailable("cannot write " + path);
    }
  } else if (errno != EEXIST) {
    return Error::Unavailable("cannot create " + path + ": " + std::strerror(errno));
  }
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error::Unavailable("cannot open " + path + ": " + std::strerror(errno));
  auto key = ReadKeyFile(path, fd, key_bytes);
  ::close(fd);
  return key;
}

}  // namespace atrium

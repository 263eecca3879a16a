// How the identity service hashes and checks passwords, behind an interface
// so tests can count the work a login does (a refusal must cost what a wrong
// password costs, or the time it takes tells account names apart).
#pragma once

#include <memory>
#include <string>

#include "common/result.h"

namespace atrium {

class PasswordHasher {
 public:
  virtual ~PasswordHasher() = default;
  // An encoded hash of `password` (argon2id in production).
  virtual Result<std::string> Hash(const std::string& password) = 0;
  // True if `password` matches `encoded_hash`; false for a malformed hash.
  virtual bool Verify(const std::string& encoded_hash, const std::string& password) = 0;
};

// argon2id through libsodium; `fast` uses the minimum cost (tests, benchmarks).
std::shared_ptr<PasswordHasher> NewArgon2PasswordHasher(bool fast);

}  // namespace atrium

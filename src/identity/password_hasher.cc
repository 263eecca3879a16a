#include "identity/password_hasher.h"

#include "crypto/crypto.h"

namespace atrium {
namespace {

class Argon2PasswordHasher final : public PasswordHasher {
 public:
  explicit Argon2PasswordHasher(bool fast) : fast_(fast) {}
  Result<std::string> Hash(const std::string& password) override {
    return crypto::HashPassword(password, fast_);
  }
  bool Verify(const std::string& encoded_hash, const std::string& password) override {
    return crypto::VerifyPassword(encoded_hash, password);
  }

 private:
  bool fast_;
};

}  // namespace

std::shared_ptr<PasswordHasher> NewArgon2PasswordHasher(bool fast) {
  return std::make_shared<Argon2PasswordHasher>(fast);
}

}  // namespace atrium

// Token signing keys are stored sealed (encrypted and authenticated) with a
// key-encryption key that is never in the database: a copy of the database
// (a backup, a stolen file, a read-only SQL injection) does not let anyone
// mint access tokens.
//
// The key-encryption key lives in a file of its own (mode 0600), created at
// first start; every server sharing a store must be given the same file.
// Rows written by releases that stored the secret in plain text are sealed
// in place by IdentityService::Init (see there).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "common/result.h"
#include "crypto/crypto.h"

namespace atrium {

// What a sealed secret starts with in the signing_keys.secret column; a row
// without it is a plaintext secret of an older release.
inline constexpr char kSealedSecretPrefix[] = "sealed1:";

bool IsSealedSecret(const std::string& stored);
// "sealed1:" + base64url(nonce || ciphertext). `kek` has 32 bytes.
Result<std::string> SealSecret(const std::string& kek, const std::string& secret);
// The secret of a sealed value; FailedPrecondition if it was sealed with
// another key-encryption key (the wrong key file), InvalidArgument if it is
// not a sealed value at all.
Result<std::string> OpenSealedSecret(const std::string& kek, const std::string& stored);

// Reads the key of `key_bytes` bytes at `path` (hex, one line), creating it
// from `make_key()` with mode 0600 if it does not exist (of two processes
// starting at once, one creates and the other reads). Refuses a file that
// group or others may read, or that does not hold such a key, naming the
// path. By default: a random 32-byte key-encryption key.
Result<std::string> LoadOrCreateKeyFile(
    const std::string& path, size_t key_bytes = crypto::kSecretBoxKeyBytes,
    const std::function<std::string()>& make_key = [] {
      return crypto::RandomBytes(crypto::kSecretBoxKeyBytes);
    });

}  // namespace atrium

// Thin wrappers over libsodium: the only place that touches it.
// Call InitCrypto() once at start-up (idempotent, thread-safe).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace atrium::crypto {

void InitCrypto();

std::string RandomBytes(size_t n);
// n characters from [0-9A-Za-z], uniformly.
std::string RandomBase62(size_t n);

std::string Sha256(std::string_view data);  // 32 raw bytes
std::string Sha256Hex(std::string_view data);
std::string HmacSha256(std::string_view key, std::string_view data);  // 32 raw bytes

std::string HexEncode(std::string_view raw);
bool HexDecode(std::string_view hex, std::string& out);
std::string Base64UrlEncode(std::string_view raw);  // no padding
bool Base64UrlDecode(std::string_view text, std::string& out);

// Constant-time comparison of two equal-length secrets; false if lengths differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// argon2id password hashing in libsodium's encoded form ($argon2id$v=19$...).
// `fast` uses the minimum cost; only tests and the scale benchmark set it.
Result<std::string> HashPassword(std::string_view password, bool fast = false);
bool VerifyPassword(std::string_view encoded_hash, std::string_view password);

// Ed25519 signatures (libsodium's crypto_sign_detached): public keys are 32
// raw bytes, secret keys 64 (seed and public key), signatures 64.
struct SigningKeyPair {
  std::string public_key;
  std::string secret_key;
};
SigningKeyPair GenerateSigningKeyPair();
inline constexpr size_t kSigningSecretKeyBytes = 64;
// Errors: kInvalidArgument when secret_key is not 64 bytes.
Result<std::string> SignDetached(std::string_view secret_key, std::string_view message);
// False for a wrong key or signature length as for a bad signature.
bool VerifyDetached(std::string_view public_key, std::string_view message,
                    std::string_view signature);
// The public half of a 64-byte secret key ("" if it is not 64 bytes).
std::string PublicKeyOf(std::string_view secret_key);

// Authenticated secret-key encryption (XSalsa20-Poly1305, libsodium's
// secretbox) with a random nonce. `key` must have kSecretBoxKeyBytes bytes.
// Seal returns nonce || ciphertext; Open fails (InvalidArgument) on a wrong
// key, a wrong length or any tampering.
inline constexpr size_t kSecretBoxKeyBytes = 32;
Result<std::string> SecretBoxSeal(std::string_view key, std::string_view plaintext);
Result<std::string> SecretBoxOpen(std::string_view key, std::string_view sealed);

// CRC-32 (IEEE), for API-key checksums that secret scanners can check offline.
uint32_t Crc32(std::string_view data);
// Fixed-width base62 of v (most significant digit first).
std::string Base62Fixed(uint64_t v, size_t width);

}  // namespace atrium::crypto

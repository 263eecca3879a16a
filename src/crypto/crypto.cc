#include "crypto/crypto.h"

#include <sodium.h>

#include <boost/crc.hpp>
#include <cstdlib>
#include <mutex>

namespace atrium::crypto {
namespace {
constexpr char kBase62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
}

void InitCrypto() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (sodium_init() < 0) std::abort();  // no entropy source: cannot run safely
  });
}

std::string RandomBytes(size_t n) {
  InitCrypto();
  std::string out(n, '\0');
  randombytes_buf(out.data(), n);
  return out;
}

std::string RandomBase62(size_t n) {
  InitCrypto();
  std::string out(n, '0');
  for (auto& c : out) c = kBase62[randombytes_uniform(62)];
  return out;
}

std::string Sha256(std::string_view data) {
  std::string out(crypto_hash_sha256_BYTES, '\0');
  crypto_hash_sha256(reinterpret_cast<unsigned char*>(out.data()),
                     reinterpret_cast<const unsigned char*>(data.data()), data.size());
  return out;
}

std::string Sha256Hex(std::string_view data) { return HexEncode(Sha256(data)); }

std::string HmacSha256(std::string_view key, std::string_view data) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(key.data()), key.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(data.data()),
                                data.size());
  std::string out(crypto_auth_hmacsha256_BYTES, '\0');
  crypto_auth_hmacsha256_final(&st, reinterpret_cast<unsigned char*>(out.data()));
  return out;
}

std::string HexEncode(std::string_view raw) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

bool HexDecode(std::string_view hex, std::string& out) {
  if (hex.size() % 2) return false;
  out.assign(hex.size() / 2, '\0');
  size_t bin_len = 0;
  return sodium_hex2bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), hex.data(),
                        hex.size(), nullptr, &bin_len, nullptr) == 0 &&
         bin_len == out.size();
}

std::string Base64UrlEncode(std::string_view raw) {
  constexpr int kVariant = sodium_base64_VARIANT_URLSAFE_NO_PADDING;
  std::string out(sodium_base64_encoded_len(raw.size(), kVariant), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(raw.data()),
                    raw.size(), kVariant);
  out.resize(std::char_traits<char>::length(out.c_str()));
  return out;
}

bool Base64UrlDecode(std::string_view text, std::string& out) {
  out.assign(text.size(), '\0');
  size_t len = 0;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(),
                        text.size(), nullptr, &len, nullptr,
                        sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0) {
    return false;
  }
  out.resize(len);
  return true;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

Result<std::string> HashPassword(std::string_view password, bool fast) {
  InitCrypto();
  char out[crypto_pwhash_STRBYTES];
  unsigned long long ops = fast ? crypto_pwhash_OPSLIMIT_MIN : crypto_pwhash_OPSLIMIT_INTERACTIVE;
  size_t mem = fast ? crypto_pwhash_MEMLIMIT_MIN : crypto_pwhash_MEMLIMIT_INTERACTIVE;
  if (crypto_pwhash_str_alg(out, password.data(), password.size(), ops, mem,
                            crypto_pwhash_ALG_ARGON2ID13) != 0) {
    return Error::Internal("password hashing ran out of memory");
  }
  return std::string(out);
}

bool VerifyPassword(std::string_view encoded_hash, std::string_view password) {
  InitCrypto();
  std::string h(encoded_hash);
  return crypto_pwhash_str_verify(h.c_str(), password.data(), password.size()) == 0;
}

SigningKeyPair GenerateSigningKeyPair() {
  InitCrypto();
  SigningKeyPair pair;
  pair.public_key.assign(crypto_sign_PUBLICKEYBYTES, '\0');
  pair.secret_key.assign(crypto_sign_SECRETKEYBYTES, '\0');
  crypto_sign_keypair(reinterpret_cast<unsigned char*>(pair.public_key.data()),
                      reinterpret_cast<unsigned char*>(pair.secret_key.data()));
  return pair;
}

Result<std::string> SignDetached(std::string_view secret_key, std::string_view message) {
  if (secret_key.size() != crypto_sign_SECRETKEYBYTES) {
    return Error::InvalidArgument("an Ed25519 secret key is " +
                                  std::to_string(crypto_sign_SECRETKEYBYTES) + " bytes");
  }
  InitCrypto();
  std::string signature(crypto_sign_BYTES, '\0');
  crypto_sign_detached(reinterpret_cast<unsigned char*>(signature.data()), nullptr,
                       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                       reinterpret_cast<const unsigned char*>(secret_key.data()));
  return signature;
}

bool VerifyDetached(std::string_view public_key, std::string_view message,
                    std::string_view signature) {
  if (public_key.size() != crypto_sign_PUBLICKEYBYTES || signature.size() != crypto_sign_BYTES) {
    return false;
  }
  InitCrypto();
  return crypto_sign_verify_detached(
             reinterpret_cast<const unsigned char*>(signature.data()),
             reinterpret_cast<const unsigned char*>(message.data()), message.size(),
             reinterpret_cast<const unsigned char*>(public_key.data())) == 0;
}

std::string PublicKeyOf(std::string_view secret_key) {
  if (secret_key.size() != crypto_sign_SECRETKEYBYTES) return "";
  std::string pk(crypto_sign_PUBLICKEYBYTES, '\0');
  crypto_sign_ed25519_sk_to_pk(reinterpret_cast<unsigned char*>(pk.data()),
                               reinterpret_cast<const unsigned char*>(secret_key.data()));
  return pk;
}

Result<std::string> SecretBoxSeal(std::string_view key, std::string_view plaintext) {
  InitCrypto();
  static_assert(kSecretBoxKeyBytes == crypto_secretbox_KEYBYTES);
  if (key.size() != crypto_secretbox_KEYBYTES) {
    return Error::InvalidArgument("secret box key must have 32 bytes");
  }
  std::string out(crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES + plaintext.size(), '\0');
  auto* nonce = reinterpret_cast<unsigned char*>(out.data());
  randombytes_buf(nonce, crypto_secretbox_NONCEBYTES);
  crypto_secretbox_easy(nonce + crypto_secretbox_NONCEBYTES,
                        reinterpret_cast<const unsigned char*>(plaintext.data()), plaintext.size(),
                        nonce, reinterpret_cast<const unsigned char*>(key.data()));
  return out;
}

Result<std::string> SecretBoxOpen(std::string_view key, std::string_view sealed) {
  InitCrypto();
  if (key.size() != crypto_secretbox_KEYBYTES) {
    return Error::InvalidArgument("secret box key must have 32 bytes");
  }
  if (sealed.size() < crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES) {
    return Error::InvalidArgument("sealed text is too short");
  }
  const auto* nonce = reinterpret_cast<const unsigned char*>(sealed.data());
  size_t cipher_len = sealed.size() - crypto_secretbox_NONCEBYTES;
  std::string out(cipher_len - crypto_secretbox_MACBYTES, '\0');
  if (crypto_secretbox_open_easy(reinterpret_cast<unsigned char*>(out.data()),
                                 nonce + crypto_secretbox_NONCEBYTES, cipher_len, nonce,
                                 reinterpret_cast<const unsigned char*>(key.data())) != 0) {
    return Error::InvalidArgument("sealed text does not open with this key");
  }
  return out;
}

uint32_t Crc32(std::string_view data) {
  boost::crc_32_type crc;
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

std::string Base62Fixed(uint64_t v, size_t width) {
  std::string out(width, '0');
  for (size_t i = width; i-- > 0;) {
    out[i] = kBase62[v % 62];
    v /= 62;
  }
  return out;
}

}  // namespace atrium::crypto

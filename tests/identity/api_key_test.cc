#include "identity/api_key.h"

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>

#include "crypto/crypto.h"

namespace atrium {
namespace {

constexpr size_t kKeyLength = 4 + 12 + 1 + 32 + 6;

// Re-computes the trailing checksum so that a test can change the body of a
// key and have only that change judged.
std::string WithValidChecksum(std::string body_and_old_checksum) {
  std::string body = body_and_old_checksum.substr(0, body_and_old_checksum.size() - 6);
  return body + crypto::Base62Fixed(crypto::Crc32(body), 6);
}

bool IsBase62(const std::string& s) {
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

TEST(ApiKeyTest, GeneratedKeyParsesBack) {
  GeneratedApiKey k = GenerateApiKey();
  ASSERT_EQ(k.text.size(), kKeyLength) << k.text;
  EXPECT_EQ(k.text.substr(0, 4), "atr_");
  EXPECT_EQ(k.text.substr(4, 12), k.key_id);
  EXPECT_EQ(k.text[16], '_');
  EXPECT_EQ(k.key_id.size(), 12u);
  EXPECT_TRUE(IsBase62(k.key_id)) << k.key_id;
  EXPECT_TRUE(IsBase62(k.text.substr(17))) << k.text;
  EXPECT_TRUE(LooksLikeApiKey(k.text));

  auto parsed = ParseApiKey(k.text);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_EQ(parsed->key_id, k.key_id);
  EXPECT_EQ(parsed->secret, k.text.substr(17, 32));
  // Only the secret's hash is kept, and it is the hash of the parsed secret.
  EXPECT_EQ(k.secret_hash, HashApiKeySecret(parsed->secret));
  EXPECT_EQ(k.secret_hash, crypto::Sha256Hex(parsed->secret));
  EXPECT_EQ(k.text.find(k.secret_hash), std::string::npos);
}

TEST(ApiKeyTest, TwoKeysDiffer) {
  std::set<std::string> texts, ids, hashes;
  for (int i = 0; i < 50; ++i) {
    GeneratedApiKey k = GenerateApiKey();
    texts.insert(k.text);
    ids.insert(k.key_id);
    hashes.insert(k.secret_hash);
  }
  EXPECT_EQ(texts.size(), 50u);
  EXPECT_EQ(ids.size(), 50u);
  EXPECT_EQ(hashes.size(), 50u);
}

TEST(ApiKeyTest, BadChecksumIsRejected) {
  const std::string text = GenerateApiKey().text;
  // Change each character of the body in turn: the checksum no longer fits.
  for (size_t i = 4; i < text.size(); ++i) {
    if (i == 16) continue;  // the separator
    std::string bad = text;
    bad[i] = bad[i] == 'a' ? 'b' : 'a';
    auto r = ParseApiKey(bad);
    ASSERT_FALSE(r.has_value()) << "position " << i;
    EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
  }
  // Two characters swapped (a typo CRC-32 catches).
  std::string swapped = text;
  std::swap(swapped[20], swapped[21]);
  if (swapped != text) {
    EXPECT_FALSE(ParseApiKey(swapped).has_value());
  }
}

TEST(ApiKeyTest, WrongLengthIsRejected) {
  const std::string text = GenerateApiKey().text;
  for (const std::string& bad :
       {text.substr(0, text.size() - 1), text + "0", std::string(), std::string("atr_"),
        WithValidChecksum(text.substr(0, 20) + text.substr(21))}) {
    EXPECT_FALSE(LooksLikeApiKey(bad)) << bad;
    auto r = ParseApiKey(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
  }
}

TEST(ApiKeyTest, WrongPrefixOrSeparatorIsRejected) {
  const std::string text = GenerateApiKey().text;
  for (const char* prefix : {"atx_", "ATR_", "atr-", "sk-_"}) {
    std::string bad = WithValidChecksum(std::string(prefix) + text.substr(4));
    EXPECT_FALSE(LooksLikeApiKey(bad)) << bad;
    EXPECT_FALSE(ParseApiKey(bad).has_value()) << bad;
  }
  std::string no_separator = text;
  no_separator[16] = 'x';
  no_separator = WithValidChecksum(no_separator);
  EXPECT_TRUE(LooksLikeApiKey(no_separator)) << "shape only";
  EXPECT_FALSE(ParseApiKey(no_separator).has_value());
}

// Characters outside [0-9A-Za-z] are refused even when the checksum matches.
TEST(ApiKeyTest, NonBase62IsRejected) {
  const std::string text = GenerateApiKey().text;
  for (size_t pos : {size_t{5}, size_t{20}, size_t{48}}) {
    for (char c : {'-', '_', '+', '/', '=', ' ', '\0', '\xc3'}) {
      std::string bad = text;
      bad[pos] = c;
      bad = WithValidChecksum(bad);
      auto r = ParseApiKey(bad);
      EXPECT_FALSE(r.has_value()) << "position " << pos << " char " << int(c);
    }
  }
  // In the checksum itself.
  std::string bad_check = text;
  bad_check.back() = '-';
  EXPECT_FALSE(ParseApiKey(bad_check).has_value());
}

TEST(ApiKeyTest, LooksLikeApiKeyIsOnlyAShapeCheck) {
  EXPECT_TRUE(LooksLikeApiKey(GenerateApiKey().text));
  EXPECT_TRUE(LooksLikeApiKey("atr_" + std::string(kKeyLength - 4, 'x')));
  EXPECT_FALSE(LooksLikeApiKey("eyJhbGciOiJIUzI1NiJ9.e30.sig"));
  EXPECT_FALSE(LooksLikeApiKey("atr_short"));
  EXPECT_FALSE(LooksLikeApiKey(std::string(kKeyLength, 'x')));
}

}  // namespace
}  // namespace atrium

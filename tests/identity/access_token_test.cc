#include "identity/access_token.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/strings.h"
#include "crypto/crypto.h"

namespace atrium {
namespace {

using Json = nlohmann::json;

constexpr int64_t kNow = 1'790'000'000;

SigningKey Key(const std::string& id, char fill) {
  return SigningKey{id, std::string(64, fill), 0};
}

TokenClaims Claims() {
  return TokenClaims{"usr_alice", "tn_acme", "tenant-admin", "ses_1", kNow, kNow + 3600};
}

std::string MustSign(const TokenClaims& c, const std::vector<SigningKey>& keys) {
  auto t = SignAccessToken(c, keys);
  EXPECT_TRUE(t.has_value()) << t.error().message;
  return t.has_value() ? *t : "";
}

// A token assembled by hand, signed with `key` the way the signer does.
std::string Forge(const Json& header, const Json& payload, const SigningKey& key) {
  std::string raw_secret;
  EXPECT_TRUE(crypto::HexDecode(key.secret, raw_secret));
  std::string input =
      crypto::Base64UrlEncode(header.dump()) + "." + crypto::Base64UrlEncode(payload.dump());
  return input + "." + crypto::Base64UrlEncode(crypto::HmacSha256(raw_secret, input));
}

Json Decode(std::string_view part) {
  std::string text;
  EXPECT_TRUE(crypto::Base64UrlDecode(part, text));
  return Json::parse(text);
}

Json PayloadOf(const TokenClaims& c) {
  return {{"sub", c.subject},    {"tid", c.tenant_id}, {"role", c.role},
          {"sid", c.session_id}, {"iat", c.issued_at}, {"exp", c.expires_at}};
}

void ExpectInvalid(const std::string& token, const std::vector<SigningKey>& keys,
                   int64_t now = kNow) {
  auto r = VerifyAccessToken(token, keys, now);
  ASSERT_FALSE(r.has_value()) << token;
  EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
}

TEST(AccessTokenTest, SignedTokenVerifiesWithItsClaims) {
  const std::vector<SigningKey> keys = {Key("sk_1", 'a')};
  std::string token = MustSign(Claims(), keys);
  auto parts = SplitString(token, '.');
  ASSERT_EQ(parts.size(), 3u);
  Json header = Decode(parts[0]);
  EXPECT_EQ(header["alg"], "HS256");
  EXPECT_EQ(header["kid"], "sk_1");

  auto c = VerifyAccessToken(token, keys, kNow);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->subject, "usr_alice");
  EXPECT_EQ(c->tenant_id, "tn_acme");
  EXPECT_EQ(c->role, "tenant-admin");
  EXPECT_EQ(c->session_id, "ses_1");
  EXPECT_EQ(c->issued_at, kNow);
  EXPECT_EQ(c->expires_at, kNow + 3600);

  // Platform staff have an empty tenant id, which must survive.
  TokenClaims staff = Claims();
  staff.tenant_id = "";
  auto s = VerifyAccessToken(MustSign(staff, keys), keys, kNow);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->tenant_id, "");
}

TEST(AccessTokenTest, NoSigningKeyIsInternal) {
  auto r = SignAccessToken(Claims(), {});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInternal);
  ExpectInvalid(MustSign(Claims(), {Key("sk_1", 'a')}), {});
}

TEST(AccessTokenTest, ExpiresAtExp) {
  const std::vector<SigningKey> keys = {Key("sk_1", 'a')};
  std::string token = MustSign(Claims(), keys);
  EXPECT_TRUE(VerifyAccessToken(token, keys, kNow + 3599).has_value());
  for (int64_t now : {kNow + 3600, kNow + 3601, kNow + 1'000'000}) {
    auto r = VerifyAccessToken(token, keys, now);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
    EXPECT_NE(r.error().message.find("expired"), std::string::npos) << r.error().message;
  }
}

TEST(AccessTokenTest, TamperedPayloadIsRejected) {
  const std::vector<SigningKey> keys = {Key("sk_1", 'a')};
  std::string token = MustSign(Claims(), keys);
  auto parts = SplitString(token, '.');
  ASSERT_EQ(parts.size(), 3u);
  const std::vector<std::pair<const char*, Json>> edits = {
      {"role", "platform-admin"}, {"tid", "tn_other"}, {"sub", "usr_bob"},
      {"exp", kNow + 999'999},    {"sid", "ses_2"},    {"tid", ""}};
  for (const auto& [field, value] : edits) {
    Json payload = Decode(parts[1]);
    payload[field] = value;
    std::string forged = std::string(parts[0]) + "." + crypto::Base64UrlEncode(payload.dump()) +
                         "." + std::string(parts[2]);
    SCOPED_TRACE(field);
    ExpectInvalid(forged, keys);
  }
}

TEST(AccessTokenTest, TamperedSignatureOrHeaderIsRejected) {
  const std::vector<SigningKey> keys = {Key("sk_1", 'a'), Key("sk_2", 'b')};
  std::string token = MustSign(Claims(), keys);
  auto parts = SplitString(token, '.');
  ASSERT_EQ(parts.size(), 3u);

  std::string sig(parts[2]);
  for (size_t i : {size_t{0}, sig.size() / 2, sig.size() - 2}) {
    std::string bad_sig = sig;
    bad_sig[i] = bad_sig[i] == 'A' ? 'B' : 'A';
    ExpectInvalid(std::string(parts[0]) + "." + std::string(parts[1]) + "." + bad_sig, keys);
  }
  ExpectInvalid(std::string(parts[0]) + "." + std::string(parts[1]) + ".", keys);
  // The same signature under another key's kid.
  Json header = Decode(parts[0]);
  header["kid"] = "sk_2";
  ExpectInvalid(crypto::Base64UrlEncode(header.dump()) + "." + std::string(parts[1]) + "." + sig,
                keys);
  // A token signed by a key nobody trusts, claiming a trusted kid.
  SigningKey impostor = Key("sk_1", 'f');
  ExpectInvalid(MustSign(Claims(), {impostor}), keys);
}

TEST(AccessTokenTest, UnsignedOrOtherAlgorithmsAreRejected) {
  const SigningKey key = Key("sk_1", 'a');
  const Json payload = PayloadOf(Claims());
  std::string input = crypto::Base64UrlEncode(Json{{"alg", "none"}, {"kid", "sk_1"}}.dump()) + "." +
                      crypto::Base64UrlEncode(payload.dump());
  ExpectInvalid(input + ".", {key});
  ExpectInvalid(Forge({{"alg", "none"}, {"kid", "sk_1"}}, payload, key), {key});
  ExpectInvalid(Forge({{"alg", "HS512"}, {"kid", "sk_1"}}, payload, key), {key});
  ExpectInvalid(Forge({{"alg", "HS256"}}, payload, key), {key});  // no kid
  ExpectInvalid(Forge({{"alg", "HS256"}, {"kid", 1}}, payload, key), {key});
  // Sanity: the forger makes valid tokens when nothing is off.
  EXPECT_TRUE(
      VerifyAccessToken(Forge({{"alg", "HS256"}, {"kid", "sk_1"}}, payload, key), {key}, kNow)
          .has_value());
}

TEST(AccessTokenTest, UnknownKidIsRejected) {
  std::string token = MustSign(Claims(), {Key("sk_gone", 'a')});
  ExpectInvalid(token, {Key("sk_1", 'a')});
  ExpectInvalid(token, {Key("sk_1", 'b'), Key("sk_2", 'c')});
}

TEST(AccessTokenTest, ClaimsMustBeCompleteAndTyped) {
  const SigningKey key = Key("sk_1", 'a');
  const Json header = {{"alg", "HS256"}, {"typ", "JWT"}, {"kid", "sk_1"}};
  const Json good = PayloadOf(Claims());
  for (auto it = good.begin(); it != good.end(); ++it) {
    SCOPED_TRACE(it.key());
    Json missing = good;
    missing.erase(it.key());
    ExpectInvalid(Forge(header, missing, key), {key});
    Json wrong = good;
    wrong[it.key()] = it->is_string() ? Json(1) : Json(std::to_string(it->get<int64_t>()));
    ExpectInvalid(Forge(header, wrong, key), {key});
  }
  Json fractional = good;
  fractional["exp"] = static_cast<double>(kNow) + 3600.5;
  ExpectInvalid(Forge(header, fractional, key), {key});
  ExpectInvalid(Forge(header, Json::array({1, 2}), key), {key});
}

TEST(AccessTokenTest, MalformedTokensAreRejected) {
  const std::vector<SigningKey> keys = {Key("sk_1", 'a')};
  std::string token = MustSign(Claims(), keys);
  for (const std::string& bad :
       {std::string(), std::string("."), std::string(".."), std::string("a.b"), token + ".extra",
        std::string("!!!.@@@.###"), token.substr(0, token.size() - 1) + "=",
        std::string("e30.e30.e30"), token + std::string(5000, 'A')}) {
    ExpectInvalid(bad, keys);
  }
}

// Rotation: the newest key signs; a token signed by an older key verifies
// as long as that key is still in the keyset.
TEST(AccessTokenTest, RotationKeepsOldTokensValidWhileTheOldKeyIsKept) {
  const SigningKey old_key = Key("sk_old", 'a');
  const SigningKey new_key = Key("sk_new", 'b');
  std::string old_token = MustSign(Claims(), {old_key});

  const std::vector<SigningKey> rotated = {new_key, old_key};
  EXPECT_TRUE(VerifyAccessToken(old_token, rotated, kNow).has_value());
  std::string new_token = MustSign(Claims(), rotated);
  EXPECT_EQ(Decode(SplitString(new_token, '.')[0])["kid"], "sk_new");
  EXPECT_TRUE(VerifyAccessToken(new_token, rotated, kNow).has_value());
  ExpectInvalid(new_token, {old_key});

  // Once the old key is dropped, its tokens stop verifying.
  ExpectInvalid(old_token, {new_key});
}

TEST(AccessTokenTest, NonHexSecretsStillSignAndVerify) {
  const std::vector<SigningKey> keys = {{"sk_raw", "not hex at all", 0}};
  std::string token = MustSign(Claims(), keys);
  EXPECT_TRUE(VerifyAccessToken(token, keys, kNow).has_value());
  ExpectInvalid(token, {{"sk_raw", "not hex at all!", 0}});
}

}  // namespace
}  // namespace atrium

#include "crypto/crypto.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "crypto/ids.h"

namespace atrium::crypto {
namespace {

std::string AllBytes() {
  std::string s;
  for (int i = 0; i < 256; ++i) s.push_back(static_cast<char>(i));
  return s;
}

TEST(HexTest, KnownVectorsAndRoundTrip) {
  EXPECT_EQ(HexEncode(""), "");
  EXPECT_EQ(HexEncode(std::string("\x00\x01\xab\xff", 4)), "0001abff");
  std::string out;
  ASSERT_TRUE(HexDecode("0001abff", out));
  EXPECT_EQ(out, std::string("\x00\x01\xab\xff", 4));
  ASSERT_TRUE(HexDecode("0001ABFF", out)) << "upper case is accepted on input";
  EXPECT_EQ(out, std::string("\x00\x01\xab\xff", 4));
  ASSERT_TRUE(HexDecode("", out));
  EXPECT_EQ(out, "");

  const std::string all = AllBytes();
  std::string back;
  ASSERT_TRUE(HexDecode(HexEncode(all), back));
  EXPECT_EQ(back, all);
  std::string random = RandomBytes(100);
  ASSERT_TRUE(HexDecode(HexEncode(random), back));
  EXPECT_EQ(back, random);
}

TEST(HexTest, RejectsBadInput) {
  std::string out;
  for (const char* bad : {"0", "abc", "zz", "0g", "00 11", "0x00", "a-", "12\n"}) {
    EXPECT_FALSE(HexDecode(bad, out)) << "'" << bad << "'";
  }
}

TEST(Base64UrlTest, KnownVectorsAndRoundTrip) {
  // RFC 4648 vectors, URL alphabet, no padding.
  EXPECT_EQ(Base64UrlEncode(""), "");
  EXPECT_EQ(Base64UrlEncode("f"), "Zg");
  EXPECT_EQ(Base64UrlEncode("fo"), "Zm8");
  EXPECT_EQ(Base64UrlEncode("foo"), "Zm9v");
  EXPECT_EQ(Base64UrlEncode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64UrlEncode("\xfb\xff"), "-_8") << "URL-safe alphabet";

  std::string out;
  ASSERT_TRUE(Base64UrlDecode("Zm9vYmE", out));
  EXPECT_EQ(out, "fooba");
  ASSERT_TRUE(Base64UrlDecode("-_8", out));
  EXPECT_EQ(out, "\xfb\xff");
  ASSERT_TRUE(Base64UrlDecode("", out));
  EXPECT_EQ(out, "");

  for (size_t n = 0; n < 40; ++n) {
    std::string raw = RandomBytes(n);
    std::string text = Base64UrlEncode(raw);
    EXPECT_EQ(text.find_first_of("+/="), std::string::npos) << text;
    std::string back;
    ASSERT_TRUE(Base64UrlDecode(text, back)) << text;
    EXPECT_EQ(back, raw);
  }
  const std::string all = AllBytes();
  ASSERT_TRUE(Base64UrlDecode(Base64UrlEncode(all), out));
  EXPECT_EQ(out, all);
}

TEST(Base64UrlTest, RejectsBadInput) {
  std::string out;
  // Standard alphabet, padding, stray characters and impossible lengths.
  for (const char* bad : {"+/8", "Zg==", "Zm9v!", "Zm 9v", "Z", "Zm9vY", "Zm9v\n", "=="}) {
    EXPECT_FALSE(Base64UrlDecode(bad, out)) << "'" << bad << "'";
  }
}

TEST(ConstantTimeEqualsTest, ComparesContentAndLength) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "Secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret1"));
  EXPECT_FALSE(ConstantTimeEquals("secret", ""));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_TRUE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0b", 3)));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST(HashTest, Sha256AndHmacKnownVectors) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256("abc").size(), 32u);
  // RFC 4231, test case 2.
  EXPECT_EQ(HexEncode(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_NE(HmacSha256("key1", "data"), HmacSha256("key2", "data"));
}

TEST(PasswordTest, HashAndVerify) {
  auto hash = HashPassword("correct horse battery staple", /*fast=*/true);
  ASSERT_TRUE(hash.has_value()) << hash.error().message;
  EXPECT_EQ(hash->rfind("$argon2id$", 0), 0u) << *hash;
  EXPECT_EQ(hash->find("correct horse"), std::string::npos);
  EXPECT_TRUE(VerifyPassword(*hash, "correct horse battery staple"));
  EXPECT_FALSE(VerifyPassword(*hash, "correct horse battery stapl"));
  EXPECT_FALSE(VerifyPassword(*hash, "Correct horse battery staple"));
  EXPECT_FALSE(VerifyPassword(*hash, ""));

  // A fresh salt every time.
  auto again = HashPassword("correct horse battery staple", /*fast=*/true);
  ASSERT_TRUE(again.has_value());
  EXPECT_NE(*again, *hash);
  EXPECT_TRUE(VerifyPassword(*again, "correct horse battery staple"));

  // Malformed or edited hashes verify nothing.
  EXPECT_FALSE(VerifyPassword("", "x"));
  EXPECT_FALSE(VerifyPassword("not a hash", "not a hash"));
  std::string edited = *hash;
  edited.back() = edited.back() == 'A' ? 'B' : 'A';
  EXPECT_FALSE(VerifyPassword(edited, "correct horse battery staple"));

  auto empty = HashPassword("", /*fast=*/true);
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(VerifyPassword(*empty, ""));
  EXPECT_FALSE(VerifyPassword(*empty, " "));
}

TEST(Crc32Test, KnownVectors) {
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(Crc32(""), 0u);
  EXPECT_EQ(Crc32("The quick brown fox jumps over the lazy dog"), 0x414FA339u);
}

TEST(Base62Test, FixedWidthDigits) {
  EXPECT_EQ(Base62Fixed(0, 4), "0000");
  EXPECT_EQ(Base62Fixed(9, 2), "09");
  EXPECT_EQ(Base62Fixed(10, 2), "0A");
  EXPECT_EQ(Base62Fixed(35, 2), "0Z");
  EXPECT_EQ(Base62Fixed(36, 2), "0a");
  EXPECT_EQ(Base62Fixed(61, 2), "0z");
  EXPECT_EQ(Base62Fixed(62, 2), "10");
  EXPECT_EQ(Base62Fixed(62 * 62 - 1, 2), "zz");
  EXPECT_EQ(Base62Fixed(62 * 62, 2), "00") << "only the low `width` digits are kept";
  EXPECT_EQ(Base62Fixed(0xFFFFFFFFu, 6), "4gfFC3");
  EXPECT_EQ(Base62Fixed(1, 0), "");
  // Order of values is order of text (a sortable encoding).
  EXPECT_LT(Base62Fixed(100, 3), Base62Fixed(3000, 3));
}

TEST(RandomTest, RandomBase62ShapeAndVariety) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string s = RandomBase62(32);
    ASSERT_EQ(s.size(), 32u);
    for (char c : s) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << s;
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(RandomBytes(17).size(), 17u);
  EXPECT_NE(RandomBytes(16), RandomBytes(16));
}

TEST(IdsTest, NewIdShape) {
  ManualClock clock;
  std::string id = NewId("tn", clock);
  ASSERT_EQ(id.size(), 3u + 26u) << id;
  EXPECT_EQ(id.substr(0, 3), "tn_");
  for (char c : id.substr(3)) {
    EXPECT_NE(std::string_view("0123456789abcdefghjkmnpqrstvwxyz").find(c), std::string::npos)
        << id;
  }
  EXPECT_TRUE(IsWellFormedId(id, "tn"));

  ManualClock epoch(0);
  EXPECT_EQ(NewId("x", epoch).substr(2, 10), "0000000000");
  ManualClock one(1);
  EXPECT_EQ(NewId("x", one).substr(2, 10), "0000000001");
  ManualClock thirty_two(32);
  EXPECT_EQ(NewId("x", thirty_two).substr(2, 10), "0000000010");
}

TEST(IdsTest, IdsSortByCreationTimeAndDifferWithinAMillisecond) {
  ManualClock clock;
  std::vector<std::string> ids;
  std::set<std::string> unique;
  for (int i = 0; i < 200; ++i) {
    // Several ids per millisecond, and some big steps.
    if (i % 3 == 0) clock.AdvanceMillis(1);
    if (i % 50 == 0) clock.AdvanceSeconds(86'400);
    std::string id = NewId("usr", clock);
    if (!ids.empty() && i % 3 == 0) {
      EXPECT_LT(ids.back(), id);
    }
    ids.push_back(id);
    unique.insert(id);
  }
  EXPECT_EQ(unique.size(), ids.size());
}

TEST(IdsTest, IsWellFormedIdRejectsOtherShapes) {
  ManualClock clock;
  const std::string id = NewId("key", clock);
  ASSERT_TRUE(IsWellFormedId(id, "key"));
  EXPECT_FALSE(IsWellFormedId(id, "ke"));
  EXPECT_FALSE(IsWellFormedId(id, "usr"));
  EXPECT_FALSE(IsWellFormedId(id.substr(0, id.size() - 1), "key"));
  EXPECT_FALSE(IsWellFormedId(id + "0", "key"));
  EXPECT_FALSE(IsWellFormedId("", "key"));
  std::string no_underscore = id;
  no_underscore[3] = '-';
  EXPECT_FALSE(IsWellFormedId(no_underscore, "key"));
  for (char bad : {'A', 'i', 'l', 'o', 'u', '_', '-', ' '}) {
    std::string s = id;
    s.back() = bad;
    EXPECT_FALSE(IsWellFormedId(s, "key")) << s;
  }
}

// RFC 8032 section 7.1, test 1: the empty message.
TEST(SigningTest, Ed25519KnownVector) {
  std::string seed, public_key, signature;
  ASSERT_TRUE(HexDecode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", seed));
  ASSERT_TRUE(
      HexDecode("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", public_key));
  std::string secret_key = seed + public_key;
  EXPECT_EQ(PublicKeyOf(secret_key), public_key);
  auto signed_empty = SignDetached(secret_key, "");
  ASSERT_TRUE(signed_empty.has_value());
  EXPECT_EQ(HexEncode(*signed_empty),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39"
            "701cf9b46bd25bf5f0595bbe24655141438e7a100b");
  EXPECT_TRUE(VerifyDetached(public_key, "", *signed_empty));
}

TEST(SigningTest, AnythingChangedFailsToVerify) {
  SigningKeyPair pair = GenerateSigningKeyPair();
  auto signature = SignDetached(pair.secret_key, "checkpoint");
  ASSERT_TRUE(signature.has_value());
  EXPECT_TRUE(VerifyDetached(pair.public_key, "checkpoint", *signature));
  EXPECT_FALSE(VerifyDetached(pair.public_key, "checkpoinT", *signature));
  EXPECT_FALSE(VerifyDetached(GenerateSigningKeyPair().public_key, "checkpoint", *signature));
  EXPECT_FALSE(VerifyDetached(pair.public_key, "checkpoint", signature->substr(1)));
  EXPECT_FALSE(SignDetached("short", "x").has_value());
  EXPECT_EQ(PublicKeyOf("short"), "");
}

}  // namespace
}  // namespace atrium::crypto

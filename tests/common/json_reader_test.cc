#include "common/json_reader.h"

#include <gtest/gtest.h>

namespace atrium {
namespace {

TEST(JsonReaderTest, ReadsDeclaredFields) {
  auto j = ParseJson(R"({"name":"acme","weight":3,"labels":{"env":"prod"}})");
  ASSERT_TRUE(j.has_value());
  JsonObjectReader r(*j);
  EXPECT_EQ(r.String("name", true), "acme");
  EXPECT_EQ(r.Int("weight"), 3);
  EXPECT_EQ(r.StringMap("labels")->at("env"), "prod");
  EXPECT_TRUE(r.Finish().has_value());
}

TEST(JsonReaderTest, UnknownFieldIsNamed) {
  auto j = ParseJson(R"({"name":"acme","colour":"red"})");
  JsonObjectReader r(*j);
  r.String("name");
  auto s = r.Finish();
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("'colour'"), std::string::npos);
}

TEST(JsonReaderTest, WrongTypeIsNamed) {
  auto j = ParseJson(R"({"weight":"heavy"})");
  JsonObjectReader r(*j);
  EXPECT_FALSE(r.Int("weight").has_value());
  auto s = r.Finish();
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("'weight' must be an integer"), std::string::npos);
}

TEST(JsonReaderTest, MissingRequiredField) {
  auto j = ParseJson(R"({})");
  JsonObjectReader r(*j);
  r.String("name", true);
  EXPECT_FALSE(r.Finish().has_value());
}

TEST(JsonReaderTest, RejectsMalformedAndDeepInput) {
  EXPECT_FALSE(ParseJson("{").has_value());
  EXPECT_FALSE(ParseJson(std::string(100, '[') + std::string(100, ']')).has_value());
  EXPECT_TRUE(ParseJson(R"({"a":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})").has_value());
}

TEST(JsonReaderTest, NonObjectBody) {
  auto j = ParseJson("[1,2]");
  JsonObjectReader r(*j);
  r.String("x");
  EXPECT_FALSE(r.Finish().has_value());
}

}  // namespace
}  // namespace atrium

#include "engine_sim/tools.h"

#include <gtest/gtest.h>

#include <string>

namespace atrium::engine_sim {
namespace {

Json ChatTools() {
  return Json::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"city":{"type":"string"},"days":{"type":"integer"},
                    "unit":{"type":"string","enum":["C","F"]},"alerts":{"type":"boolean"}}}}},
    {"type":"function","function":{"name":"get_time"}}])");
}

Result<std::optional<ToolCall>> Decide(Json body, std::string_view last_user = "") {
  return DecideToolCall(body, false, last_user, 42);
}

TEST(ToolsTest, AutoCallsTheToolTheUsersLastMessageNamesElseAnswersText) {
  Json body = {{"tools", ChatTools()}};
  auto named = Decide(body, "What does get_time say?");
  ASSERT_TRUE(named.has_value()) << named.error().message;
  ASSERT_TRUE(named->has_value());
  EXPECT_EQ((*named)->name, "get_time");
  EXPECT_EQ((*named)->arguments, "{}");
  EXPECT_EQ((*named)->call_id.rfind("call_", 0), 0u);
  auto none = Decide(body, "Just talk to me.");
  ASSERT_TRUE(none.has_value());
  EXPECT_FALSE(none->has_value());
  auto after_result = Decide(body, "");  // the last message is a tool's result
  ASSERT_TRUE(after_result.has_value());
  EXPECT_FALSE(after_result->has_value());
  body["tool_choice"] = "none";
  EXPECT_FALSE(Decide(body, "get_time please")->has_value());
}

TEST(ToolsTest, RequiredAndNamedChoicesAlwaysCall) {
  Json body = {{"tools", ChatTools()}, {"tool_choice", "required"}};
  auto required = Decide(body, "anything");
  ASSERT_TRUE(required.has_value() && required->has_value());
  EXPECT_EQ((*required)->name, "get_weather");
  // Every property, in name order, with a value of its type.
  Json arguments = Json::parse((*required)->arguments);
  EXPECT_EQ(arguments["days"], 7);
  EXPECT_EQ(arguments["unit"], "C");
  EXPECT_EQ(arguments["alerts"], true);
  EXPECT_TRUE(arguments["city"].is_string());
  EXPECT_FALSE(arguments["city"].get<std::string>().empty());

  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  auto named = Decide(body);
  ASSERT_TRUE(named.has_value() && named->has_value());
  EXPECT_EQ((*named)->name, "get_time");
}

TEST(ToolsTest, TheResponsesApisFlatShapeToo) {
  Json body = {{"tools", Json::parse(R"([{"type":"web_search"},
                 {"type":"function","name":"lookup","parameters":{"type":"object",
                  "properties":{"q":{"type":"string"}}}}])")},
               {"tool_choice", {{"type", "function"}, {"name", "lookup"}}}};
  auto call = DecideToolCall(body, true, "", 1);
  ASSERT_TRUE(call.has_value()) << call.error().message;
  ASSERT_TRUE(call->has_value());
  EXPECT_EQ((*call)->name, "lookup");
  EXPECT_TRUE(Json::parse((*call)->arguments).contains("q"));
}

TEST(ToolsTest, MalformedToolsAndChoicesAreRefusedNamingTheField) {
  const std::vector<std::pair<Json, std::string>> bad = {
      {{{"tools", 3}}, "tools"},
      {{{"tools", Json::array({7})}}, "tools[0]"},
      {{{"tools", Json::parse(R"([{"type":"function"}])")}}, "tools[0].function"},
      {{{"tools", Json::parse(R"([{"type":"function","function":{"name":""}}])")}},
       "tools[0].function.name"},
      {{{"tool_choice", "required"}}, "tools"},
      {{{"tools", ChatTools()}, {"tool_choice", "sometimes"}}, "tool_choice"},
      {{{"tools", ChatTools()},
        {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
       "nope"},
  };
  for (const auto& [body, field] : bad) {
    auto refused = Decide(body);
    ASSERT_FALSE(refused.has_value()) << body;
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(refused.error().message.find(field), std::string::npos)
        << body << " -> " << refused.error().message;
  }
}

TEST(ToolsTest, ArgumentsComeFourBytesAToken) {
  ToolCall call{"call_1", "f", R"({"city":"Paris"})"};  // 16 bytes
  EXPECT_EQ(ToolCallTokens(call), 4);
  std::string joined;
  for (int i = 0; i < ToolCallTokens(call); ++i) joined += ArgumentsPiece(call, i);
  EXPECT_EQ(joined, call.arguments);
  EXPECT_EQ(ArgumentsPiece(call, 9), "");
  EXPECT_EQ(ArgumentsAfter(call, 2), R"({"city":)");
  EXPECT_EQ(ArgumentsAfter(call, 100), call.arguments);
  EXPECT_EQ(ToolCallTokens(ToolCall{"c", "f", ""}), 1);
}

}  // namespace
}  // namespace atrium::engine_sim

#include "cli/table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace atrium::cli {
namespace {

TEST(CliCellTextTest, RendersEachJsonKind) {
  EXPECT_EQ(CellText(Json(nullptr)), "-");
  EXPECT_EQ(CellText(Json("")), "-");
  EXPECT_EQ(CellText(Json("acme")), "acme");
  EXPECT_EQ(CellText(Json(42)), "42");
  EXPECT_EQ(CellText(Json(true)), "true");
  EXPECT_EQ(CellText(Json::array({"eu-west", "us-east"})), "eu-west,us-east");
  EXPECT_EQ(CellText(Json::array()), "-");
  EXPECT_EQ(CellText(Json{{"env", "prod"}, {"team", "ml"}}), "env=prod,team=ml");
  EXPECT_EQ(CellText(Json::object()), "-");
}

TEST(CliFormatTableTest, AlignsColumnsWithoutTrailingBlanks) {
  std::string table = FormatTable({"ID", "NAME", "STATE"},
                                  {{"tn_1", "acme-corporation", "active"}, {"tn_22", "b", ""}});
  EXPECT_EQ(table,
            "ID     NAME              STATE\n"
            "tn_1   acme-corporation  active\n"
            "tn_22  b\n");
}

TEST(CliFormatTableTest, HeaderOnlyAndShortRows) {
  EXPECT_EQ(FormatTable({"A", "B"}, {}), "A  B\n");
  EXPECT_EQ(FormatTable({"A", "LONGER", "C"}, {{"x"}}), "A  LONGER  C\nx\n");
}

TEST(CliFormatObjectsTest, PicksFieldsIncludingNestedPaths) {
  std::vector<Json> items = {
      {{"id", "k1"}, {"owner", {{"name", "ann"}}}, {"scopes", Json::array({"m1", "m2"})}},
      {{"id", "k2"}, {"scopes", Json::array()}}};
  EXPECT_EQ(FormatObjects({{"ID", "id"}, {"OWNER", "owner.name"}, {"SCOPES", "scopes"}}, items),
            "ID  OWNER  SCOPES\n"
            "k1  ann    m1,m2\n"
            "k2  -      -\n");
}

TEST(CliFieldAtTest, MissingStepsAreNull) {
  Json j = {{"a", {{"b", 1}}}, {"s", "x"}};
  EXPECT_EQ(FieldAt(j, "a.b"), Json(1));
  EXPECT_TRUE(FieldAt(j, "a.c").is_null());
  EXPECT_TRUE(FieldAt(j, "s.x").is_null());
  EXPECT_TRUE(FieldAt(Json::array(), "a").is_null());
}

TEST(CliFormatDetailTest, PreferredFieldsFirstThenSortedAndFlattened) {
  Json tenant = {{"id", "tn_1"},
                 {"name", "acme"},
                 {"weight", 3},
                 {"labels", {{"env", "prod"}}},
                 {"created_at", "2026-01-01T00:00:00.000Z"},
                 {"removed", Json::object()}};
  EXPECT_EQ(FormatDetail(tenant, {"name", "id", "absent"}),
            "name:        acme\n"
            "id:          tn_1\n"
            "created_at:  2026-01-01T00:00:00.000Z\n"
            "labels.env:  prod\n"
            "removed:     -\n"
            "weight:      3\n");
}

// Regression (issue 15, item 14): display names and key names a tenant
// chose reached operators' terminals raw, so a name could set the window
// title, move the cursor or rewrite the lines above it.
TEST(CliEscapeTest, ControlCharactersBecomeVisibleEscapes) {
  EXPECT_EQ(EscapeForTerminal("plain Zo\xc3\xab \\ name"), "plain Zo\xc3\xab \\ name");
  EXPECT_EQ(EscapeForTerminal("\x1b]0;pwned\x07"), "\\x1b]0;pwned\\x07");
  EXPECT_EQ(EscapeForTerminal("two\nlines\r\tx"), "two\\nlines\\r\\tx");
  EXPECT_EQ(EscapeForTerminal(std::string("nul\0del\x7f", 8)), "nul\\x00del\\x7f");
  EXPECT_EQ(EscapeForTerminal("csi\xc2\x9b"
                              "2J"),
            "csi\\u009b2J");
  EXPECT_EQ(EscapeForTerminal("nbsp\xc2\xa0ok"), "nbsp\xc2\xa0ok");  // U+00A0 is not a control
}

// `atrium why` printed a multi-line explanation as one line with "\n" in it.
TEST(CliEscapeTest, ExplanationsKeepTheirLinesAndNothingElse) {
  EXPECT_EQ(EscapeLinesForTerminal("queued\nplacement: no node fits"),
            "queued\nplacement: no node fits");
  EXPECT_EQ(EscapeLinesForTerminal("a\n\x1b[2Jb\r\n"), "a\n\\x1b[2Jb\\r\n");
  EXPECT_EQ(EscapeLinesForTerminal(""), "");
  EXPECT_EQ(EscapeLinesForTerminal("\n"), "\n");
}

bool HasRawControl(const std::string& text, bool allow_newline) {
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n' && allow_newline) continue;
    if (c < 0x20 || c == 0x7f) return true;
    if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) <= 0x9f &&
        static_cast<unsigned char>(text[i + 1]) >= 0x80) {
      return true;
    }
  }
  return false;
}

TEST(CliEscapeTest, TablesAndDetailsCarryNoRawControls) {
  const std::string hostile =
      "evil\x1b[2J\x1b[H\nfake row\xc2\x9b"
      "31m";
  Json key = {{"name", hostile},
              {"labels", {{"k\x1b", "v\x07"}}},
              {"scopes", Json::array({"m\x1b"})},
              {"nested",
               {{"x\x1b"
                 "y",
                 hostile}}}};
  std::string table =
      FormatObjects({{"NAME", "name"}, {"LABELS", "labels"}, {"SCOPES", "scopes"}}, {key});
  EXPECT_FALSE(HasRawControl(table, /*allow_newline=*/true)) << table;
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2) << "one header, one row:\n" << table;
  EXPECT_NE(table.find("evil\\x1b[2J\\x1b[H\\nfake row\\u009b31m"), std::string::npos) << table;

  std::string raw_table = FormatTable({"A\x1b"}, {{hostile}});
  EXPECT_FALSE(HasRawControl(raw_table, true)) << raw_table;
  EXPECT_EQ(std::count(raw_table.begin(), raw_table.end(), '\n'), 2);

  std::string detail = FormatDetail(key, {"name"});
  EXPECT_FALSE(HasRawControl(detail, true)) << detail;
  EXPECT_EQ(std::count(detail.begin(), detail.end(), '\n'), 4) << detail;
}

TEST(CliEscapeTest, JsonOutputStaysValidAndCarriesNoRawControls) {
  Json value = {{"name",
                 "evil\x7f\xc2\x9b"
                 "31m\x1b[0m"}};
  std::string text = EscapeJsonForTerminal(value.dump(2, ' ', false));
  EXPECT_FALSE(HasRawControl(text, true)) << text;
  Json back = Json::parse(text);
  EXPECT_EQ(back, value);
}

}  // namespace
}  // namespace atrium::cli

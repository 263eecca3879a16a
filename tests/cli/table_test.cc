#include "cli/table.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace atrium::cli

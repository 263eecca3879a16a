#include "capacity/software_version.h"

#include <gtest/gtest.h>

#include "capacity/fleet_spec.h"
#include "support/result_matchers.h"

namespace atrium::capacity {
namespace {

SoftwareVersion V(std::string_view text) {
  auto v = SoftwareVersion::Parse(text);
  EXPECT_TRUE(v.has_value()) << text;
  return v.has_value() ? *v : SoftwareVersion{};
}

TEST(SoftwareVersionTest, ComparesNumericallyNotAsText) {
  // As text "535..." < "550..." happens to hold, but "104" < "54" would not.
  EXPECT_GT(V("550.54.15"), V("535.104.05"));
  EXPECT_GT(V("535.104.05"), V("535.54.03"));
  EXPECT_LT(V("9.2"), V("10.0"));
  EXPECT_EQ(V("12"), V("12.0"));
  EXPECT_EQ(V("12.4"), V("12.4.0.0"));
  EXPECT_LT(V("12.4"), V("12.4.1"));
  EXPECT_EQ(V("535.104.05"), V("535.104.5"));
  EXPECT_EQ(V("535.104.05").text(), "535.104.05");
}

TEST(SoftwareVersionTest, RefusesWhatIsNotAVersion) {
  for (std::string_view bad : {"", ".", "1.", ".1", "1..2", "-1", "+1", "1.2.3.4.5", "12a", "1 2",
                               "v550", "1234567", "../../etc", "550.54.15 "}) {
    SCOPED_TRACE(std::string(bad));
    EXPECT_ERROR(SoftwareVersion::Parse(bad), ErrorCode::kInvalidArgument);
  }
  EXPECT_ERROR(SoftwareVersion::Parse(std::string(40, '1')), ErrorCode::kInvalidArgument);
  auto e = SoftwareVersion::Parse("55x", "minimum driver version");
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message.find("minimum driver version \"55x\""), std::string::npos);
}

TEST(SoftwareVersionTest, UnknownOrBadNodeVersionSatisfiesNoMinimum) {
  EXPECT_TRUE(SatisfiesMinimum("550.54.15", "550"));
  EXPECT_TRUE(SatisfiesMinimum("550.54.15", "535.104.05"));
  EXPECT_FALSE(SatisfiesMinimum("550.54.15", "560"));
  EXPECT_TRUE(SatisfiesMinimum("", ""));
  EXPECT_TRUE(SatisfiesMinimum("garbage", ""));
  EXPECT_FALSE(SatisfiesMinimum("", "1"));
  EXPECT_FALSE(SatisfiesMinimum("garbage", "1"));
}

TEST(SoftwareVersionTest, SimulatedNodesReportTheDocumentedVersions) {
  auto fleet = ParseFleetSpec("1xH100-80GBx8,1xL40Sx4");
  ASSERT_OK(fleet);
  for (const Node& n : fleet->nodes()) {
    EXPECT_EQ(n.driver_version, kSimulatedDriverVersion);
    EXPECT_EQ(n.cuda_version, kSimulatedCudaVersion);
  }
  EXPECT_OK(ValidateFleet(*fleet));
}

}  // namespace
}  // namespace atrium::capacity

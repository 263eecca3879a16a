#include "templates/environment_template.h"

#include <gtest/gtest.h>

#include "support/result_matchers.h"

namespace atrium::templates {
namespace {

const std::string kDigest = "sha256:" + std::string(64, 'a');

TemplateDraft Draft() {
  TemplateDraft d;
  d.name = "pytorch-2.4";
  d.description = "PyTorch 2.4 on CUDA 12.4";
  d.rootfs_digest = kDigest;
  d.env = {{"PYTHONUNBUFFERED", "1"}, {"HF_HOME", "/tmp/hf"}};
  d.requirements = {"550.54.15", "12.4", {"h100-80gb"}};
  return d;
}

void ExpectRefused(TemplateDraft d, const std::string& words) {
  auto s = ValidateDraft(d);
  ASSERT_FALSE(s.has_value()) << words;
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(s.error().message.find(words), std::string::npos) << s.error().message;
}

TEST(EnvironmentTemplateTest, AValidDraftPassesWithCanonicalModelNames) {
  TemplateDraft d = Draft();
  ASSERT_OK(ValidateDraft(d));
  EXPECT_EQ(d.requirements.gpu_models, std::vector<std::string>{"H100-80GB"});
  EnvironmentTemplateRecord r = RecordOf(d, "usr_1", 42);
  EXPECT_EQ(r.state, "active");
  EXPECT_EQ(r.version, 0);
  EXPECT_EQ(r.min_driver_version, "550.54.15");
  EXPECT_EQ(RequirementsOf(r), d.requirements);
}

TEST(EnvironmentTemplateTest, DigestsThatAreNotDigestsAreRefused) {
  // A hostile tenant tries a host path, traversal, another spelling.
  for (const std::string& bad :
       std::vector<std::string>{std::string("/etc"), std::string("../../etc/passwd"),
                                std::string("sha256:") + std::string(63, 'a'),
                                std::string("sha256:") + std::string(65, 'a'),
                                std::string("sha256:") + std::string(64, 'A'),
                                std::string("sha512:") + std::string(64, 'a'),
                                std::string("sha256:") + std::string(62, 'a') + "/.",
                                std::string("sha256:") + std::string(60, 'a') + "/../",
                                std::string("sha256:") + std::string(64, 'g'), std::string(""),
                                "sha256:" + std::string(64, 'a') + "\n"}) {
    SCOPED_TRACE(bad);
    TemplateDraft d = Draft();
    d.rootfs_digest = bad;
    ExpectRefused(d, "rootfs_digest must be");
  }
}

TEST(EnvironmentTemplateTest, EnvironmentIsBoundedAndValidated) {
  TemplateDraft d = Draft();
  d.env.clear();
  for (size_t i = 0; i <= kMaxEnvVariables; ++i) d.env["V" + std::to_string(i)] = "x";
  ExpectRefused(d, "at most 64 variables");

  d = Draft();
  d.env["BIG"] = std::string(kMaxEnvValueLength + 1, 'x');
  ExpectRefused(d, "BIG is longer than 4096 bytes");

  d = Draft();
  for (int i = 0; i < 9; ++i) d.env["V" + std::to_string(i)] = std::string(4000, 'x');
  ExpectRefused(d, "bytes in all; at most 32768");

  for (const std::string& bad :
       std::vector<std::string>{"1X", "A-B", "A=B", "", "A B", std::string(129, 'A')}) {
    SCOPED_TRACE(bad);
    d = Draft();
    d.env[bad] = "x";
    ExpectRefused(d, "is not a variable name");
  }
  for (const std::string reserved :
       {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ATRIUM_X"}) {
    d = Draft();
    d.env[reserved] = "0";
    ExpectRefused(d, "set by the platform");
  }
  d = Draft();
  d.env["NUL"] = std::string("a\0b", 3);
  ExpectRefused(d, "NUL byte");
}

TEST(EnvironmentTemplateTest, NamesDescriptionsAndRequirementsAreChecked) {
  TemplateDraft d = Draft();
  for (const std::string& bad :
       std::vector<std::string>{"", "Upper", "a/b", "../x", "a@1", std::string(64, 'a'), "-a"}) {
    SCOPED_TRACE(bad);
    d = Draft();
    d.name = bad;
    ExpectRefused(d, "name must be a slug");
  }
  d = Draft();
  d.description = std::string(257, 'x');
  ExpectRefused(d, "description: at most 256");
  d = Draft();
  d.description = "line\nbreak";
  ExpectRefused(d, "no control characters");
  d = Draft();
  d.requirements.min_driver_version = "550.x";
  ExpectRefused(d, "requirements.min_driver_version");
  d = Draft();
  d.requirements.min_cuda_version = "12..4";
  ExpectRefused(d, "requirements.min_cuda_version");
  d = Draft();
  d.requirements.gpu_models = {"B9000"};
  ExpectRefused(d, "unknown GPU model \"B9000\"");
  d = Draft();
  d.requirements.gpu_models = {"H100-80GB", "h100-80gb"};
  ExpectRefused(d, "named twice");
}

TEST(EnvironmentTemplateTest, ReferencesAreNameOrNameAtVersion) {
  auto latest = ParseReference("pytorch");
  ASSERT_OK(latest);
  EXPECT_EQ(latest->name, "pytorch");
  EXPECT_EQ(latest->version, 0);
  auto exact = ParseReference("pytorch@12");
  ASSERT_OK(exact);
  EXPECT_EQ(exact->version, 12);
  EXPECT_EQ(exact->ToString(), "pytorch@12");
  for (const char* bad : {"", "@1", "a@", "a@0", "a@-1", "a@01", "a@1x", "a@1@2", "A", "a/b",
                          "../x", "a@99999999999", "a@1000000001"}) {
    SCOPED_TRACE(bad);
    EXPECT_ERROR(ParseReference(bad), ErrorCode::kInvalidArgument);
  }
}

EnvironmentTemplateRecord Row(std::string tenant, int64_t version, std::string state = "active") {
  EnvironmentTemplateRecord r;
  r.tenant_id = std::move(tenant);
  r.name = "base";
  r.version = version;
  r.state = std::move(state);
  r.rootfs_digest = kDigest;
  return r;
}

TEST(EnvironmentTemplateTest, NewestActiveVersionAndThePlatformFirst) {
  const std::vector<EnvironmentTemplateRecord> own = {Row("tn_a", 1), Row("tn_a", 2),
                                                      Row("tn_a", 3, "retired")};
  auto latest = ChooseVersion(own, {"base", 0});
  ASSERT_OK(latest);
  EXPECT_EQ(latest->version, 2);
  EXPECT_ERROR(ChooseVersion(own, {"base", 3}), ErrorCode::kFailedPrecondition);
  auto history = ChooseVersion(own, {"base", 3}, RetiredVersions::kReadable);
  ASSERT_OK(history);
  EXPECT_EQ(history->state, "retired");
  EXPECT_ERROR(ChooseVersion(own, {"base", 4}), ErrorCode::kNotFound);
  EXPECT_ERROR(ChooseVersion(own, {"other", 0}), ErrorCode::kNotFound);
  EXPECT_ERROR(ChooseVersion({Row("tn_a", 1, "retired")}, {"base", 0}),
               ErrorCode::kFailedPrecondition);

  // Both families exist (published at one instant): the platform's wins,
  // even when the tenant's is newer, so a tenant never shadows it.
  std::vector<EnvironmentTemplateRecord> both = {Row("", 1), Row("tn_a", 1), Row("tn_a", 5)};
  auto chosen = ChooseVersion(both, {"base", 0});
  ASSERT_OK(chosen);
  EXPECT_EQ(chosen->tenant_id, "");
  EXPECT_EQ(chosen->version, 1);
  EXPECT_ERROR(ChooseVersion(both, {"base", 5}), ErrorCode::kNotFound);
}

TEST(EnvironmentTemplateTest, RootFsIsDerivedFromTheOwnerAndDigestOnly) {
  auto platform = RootFsCandidates(Row("", 1));
  ASSERT_OK(platform);
  EXPECT_EQ(*platform, std::vector<std::string>{"sha256-" + std::string(64, 'a') + "/rootfs"});
  auto tenant = RootFsCandidates(Row("tn_a", 1));
  ASSERT_OK(tenant);
  EXPECT_EQ(*tenant,
            (std::vector<std::string>{"tenants/tn_a/sha256-" + std::string(64, 'a') + "/rootfs",
                                      "sha256-" + std::string(64, 'a') + "/rootfs"}));
  EnvironmentTemplateRecord odd = Row("../tn_b", 1);
  EXPECT_ERROR(RootFsCandidates(odd), ErrorCode::kInvalidArgument);
  EnvironmentTemplateRecord bad_digest = Row("tn_a", 1);
  bad_digest.rootfs_digest = "sha256:../../..";
  EXPECT_ERROR(RootFsCandidates(bad_digest), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace atrium::templates

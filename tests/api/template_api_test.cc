// The environment-template routes as a hostile tenant meets them: bad
// digests, traversal and oversized environments are 400 and store nothing;
// a tenant cannot publish on the platform's path nor take a platform
// template's name; another tenant's template neither shows nor resolves
// nor retires; every version stays readable, and publishing is audited.
#include <gtest/gtest.h>

#include <string>

#include "api/api_fixture.h"

namespace atrium::api {
namespace {

using fixture::Actor;
using fixture::ApiHarness;
using fixture::BodyOf;
using fixture::TenantSeed;

const std::string kDigest = "sha256:" + std::string(64, '1');

class TemplateApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = h_.CreateTenant("acme");
    b_ = h_.CreateTenant("bolt");
    alice_ = h_.CreateActor(a_.id, a_.name, Role::kTenantAdmin, /*human=*/false);
    bob_ = h_.CreateActor(b_.id, b_.name, Role::kTenantAdmin, /*human=*/false);
    viewer_ = h_.CreateActor(a_.id, a_.name, Role::kTenantViewer, /*human=*/false);
  }

  std::string Base(const TenantSeed& t) {
    return "/api/v1/tenants/" + t.id + "/environment-templates";
  }
  http::Response Publish(const std::string& base, const std::string& key, const Json& body) {
    return h_.CallJson("POST", base, key, body);
  }
  int64_t Rows() {
    auto r = h_.store().database().Exec("SELECT COUNT(*) FROM environment_templates", {});
    return r.has_value() ? r->rows.at(0).Int(0) : -1;
  }

  ApiHarness h_;
  TenantSeed a_, b_;
  Actor alice_, bob_, viewer_;
  const std::string platform_ = "/api/v1/platform/environment-templates";
};

TEST_F(TemplateApiTest, HostileBodiesAreRefusedAndStoreNothing) {
  Json huge_env = Json::object();
  for (int i = 0; i < 65; ++i) huge_env["V" + std::to_string(i)] = "x";
  Json long_value = {{"BIG", std::string(5000, 'x')}};
  const Json cases[] = {
      {{"name", "x"}, {"rootfs_digest", "/etc"}},
      {{"name", "x"}, {"rootfs_digest", "../../../var/lib/atrium"}},
      {{"name", "x"}, {"rootfs_digest", "sha256:" + std::string(64, 'A')}},
      {{"name", "x"}, {"rootfs_digest", "sha256:" + std::string(60, '1') + "/../"}},
      {{"name", "../x"}, {"rootfs_digest", kDigest}},
      {{"name", "x"}, {"rootfs_digest", kDigest}, {"env", huge_env}},
      {{"name", "x"}, {"rootfs_digest", kDigest}, {"env", long_value}},
      {{"name", "x"}, {"rootfs_digest", kDigest}, {"env", {{"LD_PRELOAD=", "x"}}}},
      {{"name", "x"}, {"rootfs_digest", kDigest}, {"env", {{"CUDA_VISIBLE_DEVICES", "0-7"}}}},
      {{"name", "x"}, {"rootfs_digest", kDigest}, {"root_fs", "/"}},
      {{"name", "x"}, {"rootfs_digest", kDigest}, {"requirements", {{"min_driver_version", "5x"}}}},
      {{"name", "x"}, {"rootfs_digest", kDigest}, {"requirements", {{"gpu_models", {"B9"}}}}},
      {{"name", "x"}, {"rootfs_digest", kDigest}, {"requirements", "550"}},
      {{"name", "x"}, {"rootfs_digest", kDigest}, {"requirements", {{"path", "/"}}}},
  };
  for (const Json& body : cases) {
    http::Response r = Publish(Base(a_), alice_.key, body);
    EXPECT_EQ(r.status, 400) << body.dump() << " -> " << r.body;
  }
  EXPECT_EQ(Rows(), 0);
}

TEST_F(TemplateApiTest, TenantsCannotActForThePlatformOrEachOther) {
  // A tenant admin on the platform's path: not found (the path is not theirs).
  EXPECT_EQ(Publish(platform_, alice_.key, {{"name", "base"}, {"rootfs_digest", kDigest}}).status,
            404);
  EXPECT_EQ(Rows(), 0);
  // The platform publishes; tenants see it in their list and cannot take its name.
  http::Response p =
      Publish(platform_, h_.root_key(), {{"name", "base"}, {"rootfs_digest", kDigest}});
  ASSERT_EQ(p.status, 201) << p.body;
  EXPECT_EQ(BodyOf(p)["reference"], "base@1");
  EXPECT_EQ(Publish(Base(a_), alice_.key, {{"name", "base"}, {"rootfs_digest", kDigest}}).status,
            409);
  // A tenant cannot retire the platform's through its own path.
  EXPECT_EQ(h_.Call("DELETE", Base(a_) + "/base@1", alice_.key).status, 404);

  // A's own template: B neither lists, reads nor retires it.
  http::Response mine =
      Publish(Base(a_), alice_.key, {{"name", "mine"}, {"rootfs_digest", kDigest}});
  ASSERT_EQ(mine.status, 201) << mine.body;
  EXPECT_EQ(BodyOf(mine)["owner"], "tenant");
  Json b_list = BodyOf(h_.Call("GET", Base(b_), bob_.key));
  ASSERT_EQ(b_list["items"].size(), 1u);
  EXPECT_EQ(b_list["items"][0]["name"], "base");
  EXPECT_EQ(h_.Call("GET", Base(b_) + "/mine", bob_.key).status, 404);
  EXPECT_EQ(h_.Call("GET", Base(a_) + "/mine", bob_.key).status, 404);
  EXPECT_EQ(h_.Call("DELETE", Base(a_) + "/mine@1", bob_.key).status, 404);
  // A sees both; a viewer reads but may not publish or retire.
  EXPECT_EQ(BodyOf(h_.Call("GET", Base(a_), viewer_.key))["items"].size(), 2u);
  EXPECT_EQ(h_.Call("GET", Base(a_) + "/base", viewer_.key).status, 200);
  EXPECT_EQ(Publish(Base(a_), viewer_.key, {{"name", "v"}, {"rootfs_digest", kDigest}}).status,
            403);
  EXPECT_EQ(h_.Call("DELETE", Base(a_) + "/mine@1", viewer_.key).status, 403);
  EXPECT_EQ(Rows(), 2);
}

TEST_F(TemplateApiTest, VersionsAreImmutableAndRetiringKeepsHistory) {
  const Json body = {
      {"name", "train"},
      {"rootfs_digest", kDigest},
      {"env", {{"OMP_NUM_THREADS", "8"}}},
      {"requirements", {{"min_driver_version", "535.104.05"}, {"gpu_models", {"h100-80gb"}}}}};
  ASSERT_EQ(Publish(Base(a_), alice_.key, body).status, 201);
  Json v2 = BodyOf(Publish(Base(a_), alice_.key, body));
  EXPECT_EQ(v2["version"], 2);
  EXPECT_EQ(v2["requirements"]["gpu_models"], Json::array({"H100-80GB"}));
  EXPECT_EQ(BodyOf(h_.Call("GET", Base(a_) + "/train", alice_.key))["version"], 2);
  EXPECT_EQ(h_.Call("DELETE", Base(a_) + "/train", alice_.key).status, 400);
  http::Response retired = h_.Call("DELETE", Base(a_) + "/train@2", alice_.key);
  ASSERT_EQ(retired.status, 200) << retired.body;
  EXPECT_EQ(BodyOf(retired)["state"], "retired");
  EXPECT_EQ(BodyOf(h_.Call("GET", Base(a_) + "/train", alice_.key))["version"], 1);
  EXPECT_EQ(BodyOf(h_.Call("GET", Base(a_) + "/train@2", alice_.key))["state"], "retired");
  EXPECT_EQ(h_.Call("GET", Base(a_) + "/train@0", alice_.key).status, 400);
  EXPECT_EQ(BodyOf(Publish(Base(a_), alice_.key, body))["version"], 3);
  auto audit = h_.store().database().Exec(
      "SELECT COUNT(*) FROM audit_log WHERE action = 'template.publish' AND outcome = 'allowed' "
      "AND target LIKE '%/environment-template/train@%'",
      {});
  ASSERT_TRUE(audit.has_value());
  EXPECT_EQ(audit->rows.at(0).Int(0), 3);
}

}  // namespace
}  // namespace atrium::api

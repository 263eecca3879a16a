// The /jobs routes: strict input that changes nothing when refused, the
// Idempotency-Key, cancel's 202 then the end, logs readable by the tenant
// only, and another tenant's job answering like a missing one.
#include <gtest/gtest.h>

#include <string>

#include "api/api_fixture.h"

namespace atrium::api {
namespace {

using fixture::Actor;
using fixture::ApiHarness;
using fixture::BodyOf;
using fixture::TenantSeed;

class JobApiTest : public fixture::TwoJobTenantsTest {
 protected:
  http::Response Submit(const Actor& who, const Json& body, const std::string& key = "") {
    fixture::CallOptions o;
    if (!key.empty()) o.headers["idempotency-key"] = key;
    return h_.CallJson("POST", "/api/v1/jobs", who.key, body, o);
  }
};

TEST_F(JobApiTest, BadSubmissionsAreRefusedAndChangeNothing) {
  const int64_t jobs = Rows("SELECT COUNT(*) FROM jobs");
  const int64_t allocations = Rows("SELECT COUNT(*) FROM allocations");
  struct Case {
    std::string body;
    int status;
    std::string says;
  } cases[] = {
      {"{", 400, "malformed JSON"},
      {"[]", 400, "object"},
      {R"({"name":"x","command":"true","resources":{"kind":"share","model":"L40S","milli":1,
          "gpu_memory_mib":16},"privileged":true})",
       400, "privileged"},
      {R"({"name":"x","command":["true"],"resources":{}})", 400, "'command'"},
      {R"({"name":"x","command":"true","resources":{"kind":"share","model":"L40S","milli":1,
          "gpu_memory_mib":16},"env":{"LD_PRELOAD":"/tmp/x.so"}})",
       400, "reserved"},
      {R"({"name":"x","command":"true","resources":{"kind":"share","model":"L40S","milli":1,
          "gpu_memory_mib":16},"time_limit_s":99999999999})",
       400, "time_limit_s"},
      {R"({"name":"x","command":"true","resources":{"kind":"share","model":"L40S","milli":1,
          "gpu_memory_mib":16},"environment":"pytorch"})",
       409, "environment"},
      {R"({"name":"x","command":"true","resources":{"kind":"share","model":"L40S","milli":1,
          "gpu_memory_mib":16},"project":"nope"})",
       400, "project"},
  };
  for (const Case& c : cases) {
    http::Response r = h_.Call("POST", "/api/v1/jobs", alice_.key, c.body);
    EXPECT_EQ(r.status, c.status) << c.body << "\n" << r.body;
    EXPECT_NE(r.body.find(c.says), std::string::npos) << c.body << "\n" << r.body;
  }
  // A huge body is refused before it is read as a job.
  Json huge = fixture::SmallJobBody();
  huge["script"] = std::string(16 * 1024 * 1024, 'x');
  huge.erase("command");
  http::Response big = h_.CallJson("POST", "/api/v1/jobs", alice_.key, huge);
  EXPECT_GE(big.status, 400);
  EXPECT_LT(big.status, 500);
  // A malformed Idempotency-Key.
  http::Response bad_key = Submit(alice_, fixture::SmallJobBody(), "has space");
  EXPECT_EQ(bad_key.status, 400) << bad_key.body;
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM jobs"), jobs);
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM allocations"), allocations);
}

TEST_F(JobApiTest, TheIdempotencyKeyReturnsTheFirstJob) {
  http::Response first = Submit(alice_, fixture::SmallJobBody("a"), "retry-1");
  ASSERT_EQ(first.status, 201) << first.body;
  http::Response again = Submit(alice_, fixture::SmallJobBody("a"), "retry-1");
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(BodyOf(again)["id"], BodyOf(first)["id"]);
  http::Response other = Submit(alice_, fixture::SmallJobBody("b"), "retry-1");
  EXPECT_EQ(other.status, 409) << other.body;
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM jobs"), 1);
  // Another tenant's same key is its own.
  EXPECT_EQ(Submit(bob_, fixture::SmallJobBody("a"), "retry-1").status, 201);
}

TEST_F(JobApiTest, CancelStopsThenTheJobEndsCancelled) {
  http::Response created = Submit(alice_, fixture::SmallJobBody());
  ASSERT_EQ(created.status, 201) << created.body;
  Json job = BodyOf(created);
  EXPECT_EQ(job["state"], "running");
  const std::string path = "/api/v1/jobs/" + job["id"].get<std::string>();
  h_.backend().AppendLog(job["workload_id"].get<std::string>(), "step 1\n");

  // Another tenant: like a missing job, and nothing changes.
  EXPECT_EQ(h_.Call("POST", path + "/cancel", bob_.key).status, 404);
  EXPECT_EQ(h_.Call("GET", path + "/logs", bob_.key).status, 404);
  EXPECT_EQ(h_.Call("GET", path, bob_.key).status, 404);
  // Platform staff read the job but never its logs.
  EXPECT_EQ(h_.Call("GET", path, h_.root_key()).status, 200);
  EXPECT_EQ(h_.Call("GET", path + "/logs", h_.root_key()).status, 403);

  http::Response logs = h_.Call("GET", path + "/logs?offset=2&max_bytes=4", alice_.key);
  ASSERT_EQ(logs.status, 200) << logs.body;
  EXPECT_EQ(BodyOf(logs)["data"], "ep 1");
  EXPECT_EQ(BodyOf(logs)["next_offset"], 6);
  EXPECT_EQ(h_.Call("GET", path + "/logs?follow=maybe", alice_.key).status, 400);
  EXPECT_EQ(h_.Call("GET", path + "/logs?max_bytes=0", alice_.key).status, 400);
  EXPECT_EQ(h_.Call("GET", path + "/logs?attempt=2", alice_.key).status, 400);
  // Numbers past int64, signs and junk are a 400, never a 500.
  for (const char* offset : {"9999999999999999999", "99999999999999999999999", "-1", "+1", "1x"}) {
    EXPECT_EQ(h_.Call("GET", path + "/logs?offset=" + offset, alice_.key).status, 400) << offset;
  }

  http::Response cancelled = h_.Call("POST", path + "/cancel", alice_.key);
  ASSERT_EQ(cancelled.status, 202) << cancelled.body;
  EXPECT_EQ(BodyOf(cancelled)["stopping"]["cause"], "cancel");
  ASSERT_TRUE(h_.jobs().Tick().has_value());
  Json now = BodyOf(h_.Call("GET", path, alice_.key));
  EXPECT_EQ(now["state"], "cancelled");
  EXPECT_EQ(h_.Call("POST", path + "/cancel", alice_.key).status, 409);

  Json events = BodyOf(h_.Call("GET", path + "/events", alice_.key));
  ASSERT_EQ(events["items"].size(), 4u);
  EXPECT_EQ(events["items"][3]["to"], "cancelled");
  EXPECT_EQ(events["items"][3]["actor"], "key:" + alice_.key_id);
  Json why = BodyOf(h_.Call("GET", path + "/why", alice_.key));
  EXPECT_NE(why["why"].get<std::string>().find("cancelled"), std::string::npos);
  Json listed = BodyOf(h_.Call("GET", "/api/v1/jobs?state=cancelled", alice_.key));
  EXPECT_EQ(listed["items"].size(), 1u);
  EXPECT_EQ(BodyOf(h_.Call("GET", "/api/v1/jobs", bob_.key))["items"].size(), 0u);
  EXPECT_EQ(h_.Call("GET", "/api/v1/jobs?state=done", alice_.key).status, 400);
}

TEST_F(JobApiTest, PlatformStaffSeeEnvNamesNotValues) {
  Json body = fixture::SmallJobBody();
  body["env"] = {{"API_TOKEN", "s3cret"}};
  http::Response created = Submit(alice_, body);
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string path = "/api/v1/jobs/" + BodyOf(created)["id"].get<std::string>();
  http::Response staff = h_.Call("GET", path, h_.root_key());
  EXPECT_EQ(staff.body.find("s3cret"), std::string::npos);
  EXPECT_NE(staff.body.find("API_TOKEN"), std::string::npos);
  EXPECT_NE(h_.Call("GET", path, alice_.key).body.find("s3cret"), std::string::npos);
}

TEST_F(JobApiTest, EvictionStopsTheTenantsJobsAndForgetsThem) {
  Json job = BodyOf(Submit(alice_, fixture::SmallJobBody()));
  const std::string workload = job["workload_id"].get<std::string>();
  ASSERT_TRUE(h_.backend().Knows(workload));
  http::Response evicted = h_.Call("POST", "/api/v1/tenants/" + a_.id + "/evict", h_.root_key());
  ASSERT_EQ(evicted.status, 200) << evicted.body;
  EXPECT_FALSE(h_.backend().Knows(workload));
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM jobs WHERE tenant_id = '" + a_.id + "'"), 0);
}

}  // namespace
}  // namespace atrium::api

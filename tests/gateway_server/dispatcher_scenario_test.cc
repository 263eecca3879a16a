// Runs every scenario file under tests/gateway_server/scenarios on the real
// Dispatcher in virtual time (as src/gateway_server/fairness_model.cc drives
// it: no sockets, no clock, no threads): deployments and their endpoints,
// tenants with weights and limits, and a timed sequence of arrivals, first
// tokens, finishes, disconnects, retries and health checks, each step with
// the events it must produce (in order, and no more), the requests that wait
// and the requests each endpoint runs. Only the Dispatcher's public API is
// used, so the files pin what the gateway does, not how the dispatcher is
// built inside.
//
// Every step's events, in the order they happen:
//   "started ID on URL"          Admit started the request at once
//   "queued ID"                  Admit put it in its deployment's queue
//   "refused ID: STATUS retry MS ms: REASON"   Admit refused it
//   "granted ID on URL"          a queued request was given a slot (its Wake
//                                ran; TakeGrant returned URL), in wake order:
//                                the start order out of the queue
//   "left ID"                    a disconnect took a waiting request out
//   "not left ID: granted"       a disconnect came after its slot was granted
//   "retried ID on URL" | "retried ID: no endpoint"
//   "chose DEPLOYMENT"           Choose() among candidate deployments
// A step's "expect" lists substrings of its events, one per event, in order:
// a step with "expect" must produce exactly that many events. The runner
// also checks on every step that no request was granted a slot without its
// Wake, that QueuedFor() of every deployment is the number of requests the
// scenario sees waiting there, and that every call that may move a request
// told DispatcherOptions::on_change. ("queue" below is the waiting requests
// in arrival order; the order the queue serves them in shows as the order
// of the "granted" events.)
//
// File format (JSON with comments; times in ms from the scenario's start):
// {
//   "discipline": "fair",                     // or "fifo" (default "fair")
//   "endpoints": [{"url": "e1", "capacity": 4, "max_prefill": 0, "burst": 0}],
//     // the one deployment "dep" (max_prefill and burst default 0), or:
//   "deployments": {"dep_a": [{...endpoint...}], "dep_b": [...]},
//   "tenants": {"a": {"weight": 1, "limits": {...}}},   // weight default 1
//   "keys": {"a_key": {...limits...}},
//     // limits: {"requests_per_minute", "tokens_per_minute", "max_concurrent",
//     //          "max_queued"}, 0 or absent: none
//   "steps": [
//     {"t": 0, "arrive": {"id": "a1", "tenant": "a", ...} | {"ids": ["a1", "a2"], ...}
//                        | [{...}, ...],
//        // request fields: "key" (default "<tenant>_key"), "deployment" (the
//        // only one by default), "stream" (false), "priority" ("interactive"
//        // or "batch"), "input" (estimated input tokens, 40), "reserve"
//        // (tokens taken from the token buckets, 100)
//      "expect": ["started a1 on e1", "queued a2"]},
//     {"t": 5, "first_token": "a1" | ["a1", ...]},
//     {"t": 9, "finish": "a1" | [...], "outcome": "succeeded" | "failed" | "abandoned",
//      "usage": [input, output]},  // default: the request's input estimate and 60;
//                                  // "endpoint": "" when a retry already settled it
//     {"t": 9, "charge_output": "a1", "tokens": 30},
//     {"t": 9, "disconnect": "b2"},          // the client left (or its deadline passed)
//     {"t": 9, "retry": "a1", "tried": ["e1"]},   // its endpoint failed before a byte
//     {"t": 9, "health": {"deployment": "dep", "url": "e1", "ok": false}},
//     {"t": 9, "choose": ["dep_a", "dep_b"]},
//     {"t": 9, "pump": true},
//     any step may also check, after it ran:
//       "queue": ["a3", "b2"]    the requests waiting, in arrival order
//                                (every deployment's)
//       "running": ["a1", "b1"]  the requests holding a slot, in start order
//       "outstanding": {"e1": 2} OutstandingOn the only deployment's
//                                endpoint ("dep_a/e1" to name the deployment)
//   ]
// }
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gateway_server/dispatcher.h"
#include "support/scenario_files.h"

namespace atrium::gateway_server {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The dispatcher's times are ms > 0; any origin will do.
constexpr int64_t kOriginMs = 1'000'000;

GatewayLimits ParseLimits(const json& j) {
  GatewayLimits l;
  l.requests_per_minute = j.value("requests_per_minute", int64_t{0});
  l.tokens_per_minute = j.value("tokens_per_minute", int64_t{0});
  l.max_concurrent = j.value("max_concurrent", int64_t{0});
  l.max_queued = j.value("max_queued", int64_t{0});
  return l;
}

std::vector<DeploymentEndpoint> ParseEndpoints(const json& j) {
  std::vector<DeploymentEndpoint> out;
  for (const json& e : j) {
    DeploymentEndpoint endpoint;
    endpoint.url = e.at("url").get<std::string>();
    endpoint.capacity = e.at("capacity").get<int64_t>();
    endpoint.max_prefill = e.value("max_prefill", int64_t{0});
    endpoint.burst = e.value("burst", int64_t{0});
    out.push_back(std::move(endpoint));
  }
  return out;
}

// One scenario's world: the dispatcher, and what the scenario knows of each
// request (where it waits or runs), which the checks compare with.
class ScenarioRun {
 public:
  explicit ScenarioRun(const json& doc) : dispatcher_(OptionsOf(doc, changes_)) {
    if (doc.contains("deployments")) {
      for (const auto& [id, endpoints] : doc.at("deployments").items()) {
        AddDeployment(id, endpoints);
      }
    } else {
      AddDeployment("dep", doc.at("endpoints"));
    }
    const json tenants = doc.value("tenants", json::object());
    for (const auto& [id, t] : tenants.items()) {
      weights_[id] = t.value("weight", 1.0);
      if (t.contains("limits")) limits_["tenant:" + id] = ParseLimits(t.at("limits"));
    }
    const json keys = doc.value("keys", json::object());
    for (const auto& [id, l] : keys.items()) {
      limits_["key:" + id] = ParseLimits(l);
    }
  }

  void Step(const json& step) {
    const int64_t t = step.value("t", int64_t{0});
    ASSERT_GE(t, last_t_) << "steps go forward in time";
    last_t_ = t;
    now_ = kOriginMs + t;
    events_.clear();
    const int64_t changes_before = *changes_;
    Act(step);
    // Every call that may change what waits or runs tells on_change (tests
    // of the gateway wait on it).
    for (const char* call : {"arrive", "first_token", "finish", "disconnect", "retry", "pump"}) {
      if (step.contains(call)) EXPECT_GT(*changes_, changes_before) << call << ": no on_change";
    }
    CollectGrants();
    CheckNoSilentGrant();
    CheckQueuedCounts();
    Check(step);
  }

 private:
  struct Live {
    SlotRequest request;
    std::string endpoint;  // "" while it waits
    uint64_t order = 0;    // arrival, then start order
  };

  static DispatcherOptions OptionsOf(const json& doc, const std::shared_ptr<int64_t>& changes) {
    DispatcherOptions options;
    options.on_change = [changes] { ++*changes; };
    const std::string discipline = doc.value("discipline", "fair");
    EXPECT_TRUE(discipline == "fair" || discipline == "fifo") << discipline;
    options.discipline = discipline == "fifo" ? QueueDiscipline::kFifo : QueueDiscipline::kFair;
    return options;
  }

  void AddDeployment(const std::string& id, const json& endpoints) {
    auto d = std::make_unique<DeploymentRecord>();
    d->id = id;
    d->model = "m";
    d->endpoints = ParseEndpoints(endpoints);
    deployments_[id] = std::move(d);
  }

  const DeploymentRecord* DeploymentOf(const json& j) {
    if (j.contains("deployment")) {
      auto it = deployments_.find(j.at("deployment").get<std::string>());
      EXPECT_NE(it, deployments_.end()) << j.dump();
      return it == deployments_.end() ? nullptr : it->second.get();
    }
    EXPECT_EQ(deployments_.size(), 1u) << "name the deployment: " << j.dump();
    return deployments_.begin()->second.get();
  }

  SlotRequest RequestOf(const std::string& id, const json& j) {
    SlotRequest r;
    r.id = ++next_numeric_id_;
    r.tenant_id = j.at("tenant").get<std::string>();
    r.key_id = j.value("key", r.tenant_id + "_key");
    auto w = weights_.find(r.tenant_id);
    r.weight = w == weights_.end() ? 1.0 : w->second;
    const std::string priority = j.value("priority", "interactive");
    EXPECT_TRUE(priority == "interactive" || priority == "batch") << priority;
    r.priority = priority == "batch" ? gateway::Priority::kBatch : gateway::Priority::kInteractive;
    for (const std::string& subject : {"tenant:" + r.tenant_id, "key:" + r.key_id}) {
      auto l = limits_.find(subject);
      if (l != limits_.end()) r.subjects.push_back({subject, l->second});
    }
    r.deployment = DeploymentOf(j);
    r.input_tokens = j.value("input", int64_t{40});
    r.reserved_tokens = j.value("reserve", int64_t{100});
    r.stream = j.value("stream", false);
    names_[r.id] = id;
    return r;
  }

  void Arrive(const json& j) {
    if (j.is_array()) {
      for (const json& one : j) Arrive(one);
      return;
    }
    std::vector<std::string> ids;
    if (j.contains("ids")) {
      ids = j.at("ids").get<std::vector<std::string>>();
    } else {
      ids.push_back(j.at("id").get<std::string>());
    }
    for (const std::string& id : ids) {
      ASSERT_EQ(live_.count(id), 0u) << "request " << id << " arrived twice";
      SlotRequest r = RequestOf(id, j);
      if (r.deployment == nullptr) return;
      const uint64_t numeric = r.id;
      Admission a = dispatcher_.Admit(r, now_, [this, numeric] { woken_.push_back(numeric); });
      switch (a.kind) {
        case Admission::Kind::kStarted:
          events_.push_back("started " + id + " on " + a.endpoint);
          live_[id] = {std::move(r), a.endpoint, ++next_order_};
          break;
        case Admission::Kind::kQueued:
          events_.push_back("queued " + id);
          live_[id] = {std::move(r), "", ++next_order_};
          break;
        case Admission::Kind::kRefused:
          events_.push_back("refused " + id + ": " + std::to_string(a.http_status) + " retry " +
                            std::to_string(a.retry_after_ms) + " ms: " + a.reason);
          break;
      }
      // A request granted in its own Admit (queued, then past the others).
      CollectGrants();
    }
  }

  Live* Find(const std::string& id) {
    auto it = live_.find(id);
    EXPECT_NE(it, live_.end()) << "no request " << id << " waits or runs";
    return it == live_.end() ? nullptr : &it->second;
  }

  static std::vector<std::string> Ids(const json& j) {
    return j.is_array() ? j.get<std::vector<std::string>>()
                        : std::vector<std::string>{j.get<std::string>()};
  }

  void Act(const json& step) {
    if (step.contains("arrive")) {
      Arrive(step.at("arrive"));
    } else if (step.contains("first_token")) {
      for (const std::string& id : Ids(step.at("first_token"))) {
        if (Live* live = Find(id)) dispatcher_.FirstToken(live->request, now_);
        CollectGrants();
      }
    } else if (step.contains("finish")) {
      const std::string outcome = step.value("outcome", "succeeded");
      Dispatcher::Outcome o = Dispatcher::Outcome::kSucceeded;
      if (outcome == "failed") {
        o = Dispatcher::Outcome::kFailed;
      } else if (outcome == "abandoned") {
        o = Dispatcher::Outcome::kAbandoned;
      } else {
        EXPECT_EQ(outcome, "succeeded");
      }
      for (const std::string& id : Ids(step.at("finish"))) {
        Live* live = Find(id);
        if (live == nullptr) continue;
        EXPECT_TRUE(!live->endpoint.empty() || live->order == 0)
            << id << " finishes while it waits";
        Dispatcher::Usage usage{live->request.input_tokens, 60, 0};
        if (step.contains("usage")) {
          usage.input_tokens = step.at("usage").at(0).get<int64_t>();
          usage.output_tokens = step.at("usage").at(1).get<int64_t>();
        }
        usage.output_charged = charged_[id];
        const std::string endpoint = step.value("endpoint", live->endpoint);
        const SlotRequest request = live->request;
        live_.erase(id);
        dispatcher_.Finish(request, endpoint, o, usage, now_);
        CollectGrants();
      }
    } else if (step.contains("charge_output")) {
      const std::string id = step.at("charge_output").get<std::string>();
      const int64_t tokens = step.at("tokens").get<int64_t>();
      if (Live* live = Find(id)) dispatcher_.ChargeOutput(live->request, tokens);
      charged_[id] += tokens;
    } else if (step.contains("disconnect")) {
      for (const std::string& id : Ids(step.at("disconnect"))) {
        Live* live = Find(id);
        if (live == nullptr) continue;
        if (dispatcher_.Cancel(live->request.id, now_)) {
          EXPECT_EQ(live->endpoint, "") << id << " left the queue while it ran";
          events_.push_back("left " + id);
          live_.erase(id);
        } else {
          events_.push_back("not left " + id + ": granted");
        }
      }
    } else if (step.contains("retry")) {
      const std::string id = step.at("retry").get<std::string>();
      Live* live = Find(id);
      if (live == nullptr) return;
      const auto tried = step.value("tried", std::vector<std::string>{live->endpoint});
      auto next = dispatcher_.Retry(live->request, live->endpoint, tried, now_);
      if (next) {
        events_.push_back("retried " + id + " on " + *next);
        live->endpoint = *next;
      } else {
        events_.push_back("retried " + id + ": no endpoint");
        live->endpoint = "";  // settled: Finish with "endpoint": ""
        live->order = 0;
      }
    } else if (step.contains("health")) {
      const json& h = step.at("health");
      const DeploymentRecord* d = DeploymentOf(h);
      if (d != nullptr) {
        dispatcher_.HealthCheck(d->id, h.at("url").get<std::string>(), h.at("ok").get<bool>(),
                                now_);
      }
    } else if (step.contains("choose")) {
      std::vector<const DeploymentRecord*> candidates;
      for (const std::string& id : step.at("choose").get<std::vector<std::string>>()) {
        auto it = deployments_.find(id);
        ASSERT_NE(it, deployments_.end()) << id;
        candidates.push_back(it->second.get());
      }
      events_.push_back("chose " + dispatcher_.Choose(candidates, now_)->id);
    } else if (step.contains("pump")) {
      dispatcher_.Pump(now_);
    } else if (!step.contains("queue") && !step.contains("running") &&
               !step.contains("outstanding")) {
      ADD_FAILURE() << "a step that does nothing: " << step.dump();
    }
  }

  // Each Wake that ran: its grant is there to take, once.
  void CollectGrants() {
    std::vector<uint64_t> woken;
    woken.swap(woken_);
    for (uint64_t numeric : woken) {
      const std::string& id = names_[numeric];
      auto grant = dispatcher_.TakeGrant(numeric);
      if (!grant) {
        ADD_FAILURE() << id << " was woken without a grant";
        continue;
      }
      events_.push_back("granted " + id + " on " + *grant);
      Live* live = Find(id);
      if (live == nullptr) continue;
      EXPECT_EQ(live->endpoint, "") << id << " was granted a slot twice";
      live->endpoint = *grant;
      live->order = ++next_order_;
    }
  }

  // A grant always comes with its Wake (the exchange waits for it).
  void CheckNoSilentGrant() {
    for (auto& [id, live] : live_) {
      if (!live.endpoint.empty()) continue;
      auto grant = dispatcher_.TakeGrant(live.request.id);
      EXPECT_FALSE(grant.has_value()) << id << " was granted " << *grant << " without its Wake";
    }
  }

  std::vector<std::string> Waiting() const {
    std::vector<std::pair<uint64_t, std::string>> waiting;
    for (const auto& [id, live] : live_) {
      if (live.endpoint.empty() && live.order != 0) waiting.emplace_back(live.order, id);
    }
    std::sort(waiting.begin(), waiting.end());
    std::vector<std::string> out;
    for (auto& [order, id] : waiting) out.push_back(id);
    return out;
  }

  void CheckQueuedCounts() {
    for (const auto& [dep, d] : deployments_) {
      size_t waiting = 0;
      for (const auto& [id, live] : live_) {
        if (live.endpoint.empty() && live.order != 0 && live.request.deployment == d.get()) {
          ++waiting;
        }
      }
      EXPECT_EQ(dispatcher_.QueuedFor(dep), waiting) << "requests waiting on " << dep;
    }
  }

  void Check(const json& step) {
    std::string all;
    for (const std::string& e : events_) all += "\n  " + e;
    if (step.contains("expect")) {
      const auto want = step.at("expect").get<std::vector<std::string>>();
      EXPECT_EQ(events_.size(), want.size()) << "events:" << all;
      for (size_t k = 0; k < std::min(events_.size(), want.size()); ++k) {
        EXPECT_NE(events_[k].find(want[k]), std::string::npos)
            << "event " << k << " is \"" << events_[k] << "\", expected to contain \"" << want[k]
            << "\"; events:" << all;
      }
    }
    if (step.contains("queue")) {
      EXPECT_EQ(Waiting(), step.at("queue").get<std::vector<std::string>>());
    }
    if (step.contains("running")) {
      std::vector<std::pair<uint64_t, std::string>> running;
      for (const auto& [id, live] : live_) {
        if (!live.endpoint.empty()) running.emplace_back(live.order, id);
      }
      std::sort(running.begin(), running.end());
      std::vector<std::string> got;
      for (auto& [order, id] : running) got.push_back(id);
      EXPECT_EQ(got, step.at("running").get<std::vector<std::string>>());
    }
    const json outstanding = step.value("outstanding", json::object());
    for (const auto& [where, want] : outstanding.items()) {
      const size_t slash = where.find('/');
      const std::string dep =
          slash == std::string::npos ? deployments_.begin()->first : where.substr(0, slash);
      const std::string url = slash == std::string::npos ? where : where.substr(slash + 1);
      EXPECT_EQ(dispatcher_.OutstandingOn(dep, url), want.get<int>()) << where;
    }
  }

  std::map<std::string, std::unique_ptr<DeploymentRecord>> deployments_;
  std::map<std::string, double> weights_;
  std::map<std::string, GatewayLimits> limits_;  // by subject ("tenant:a", "key:a_key")
  std::shared_ptr<int64_t> changes_ = std::make_shared<int64_t>(0);  // on_change calls
  Dispatcher dispatcher_;
  std::map<std::string, Live> live_;        // by the scenario's id
  std::map<uint64_t, std::string> names_;   // the dispatcher's id → the scenario's
  std::map<std::string, int64_t> charged_;  // output passed to ChargeOutput, by id
  std::vector<uint64_t> woken_;             // Wakes run since the last collection
  std::vector<std::string> events_;         // of the step running
  uint64_t next_numeric_id_ = 0;
  uint64_t next_order_ = 0;
  int64_t now_ = kOriginMs;
  int64_t last_t_ = 0;
};

void RunScenario(const fs::path& path) {
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const json doc = json::parse(in, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  ScenarioRun run(doc);
  int index = 0;
  for (const json& step : doc.at("steps")) {
    SCOPED_TRACE("step " + std::to_string(index++) + ": " + step.dump());
    run.Step(step);
    if (testing::Test::HasFatalFailure()) return;
  }
}

class DispatcherScenarioTest : public testing::TestWithParam<fs::path> {};

TEST_P(DispatcherScenarioTest, Runs) { RunScenario(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Scenarios, DispatcherScenarioTest,
                         testing::ValuesIn(testing_support::JsonFilesIn(ATRIUM_GATEWAY_SCENARIOS)),
                         testing_support::NameOfFile);

}  // namespace
}  // namespace atrium::gateway_server

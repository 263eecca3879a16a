// Usage records survive `kill -9` of the gateway under load, exactly once:
// the real `atrium dev` in front of a separate `atrium engine-sim`, clients
// streaming and not on several threads, SIGKILL mid-load, a restart on the
// same data directory, then the stored records are compared with what the
// clients saw complete and with what the engine simulator says it served;
// streams the kill cut off are billed as interrupted from their checkpoint.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "http/client.h"
#include "integration/subprocess.h"

namespace atrium {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;
using testing::BackgroundProcess;

std::vector<std::string> Env() {
  std::vector<std::string> env;
  for (const char* name : {"PATH", "HOME", "TMPDIR"}) {
    if (const char* v = std::getenv(name)) env.push_back(std::string(name) + "=" + v);
  }
  return env;
}

int PortOf(const std::string& url) { return std::stoi(url.substr(url.rfind(':') + 1)); }

// What a client saw of one request.
struct Seen {
  std::string id;         // X-Request-Id of a 200 answer ("" for none)
  bool complete = false;  // the whole response arrived
};

// One request on a fresh connection.
Seen CallOnce(int port, const std::string& key, bool stream, int max_tokens) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return {};
  }
  Json body = {{"model", "crash-model"},
               {"messages", {{{"role", "user"}, {"content", "Count the records, please."}}}},
               {"max_tokens", max_tokens}};
  if (stream) body["stream"] = true;
  std::string b = body.dump();
  std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " +
                    key + "\r\nContent-Type: application/json\r\nConnection: close\r\n" +
                    "Content-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b;
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string raw;
  char buf[8192];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10'000) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  Seen seen;

  if (raw.rfind("HTTP/1.1 200", 0) != 0) return seen;
  size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return seen;
  std::string head = raw.substr(0, head_end);
  std::string rest = raw.substr(head_end + 4);
  size_t id = head.find("X-Request-Id: ");
  if (id == std::string::npos) return seen;
  seen.id = head.substr(id + 14, head.find("\r\n", id) - id - 14);
  // Complete: the chunked terminator, or the whole Content-Length.
  if (stream) {
    seen.complete = rest.size() >= 5 && rest.compare(rest.size() - 5, 5, "0\r\n\r\n") == 0 &&
                    rest.find("data: [DONE]") != std::string::npos;
  } else {
    size_t cl = head.find("Content-Length: ");
    seen.complete = cl != std::string::npos && rest.size() >= std::stoul(head.substr(cl + 16));
  }
  return seen;
}

Json Get(const std::string& base, const std::string& target, const std::string& token) {
  auto client = http::Client::Create(base);
  if (!client.has_value()) return Json();
  auto r = (*client)->Send("GET", target, "", {{"authorization", "Bearer " + token}});
  if (!r.has_value() || r->status != 200) return Json();
  return Json::parse(r->body, nullptr, false);
}

std::string Post(const std::string& base, const std::string& method, const std::string& target,
                 const std::string& token, const std::string& body) {
  auto client = http::Client::Create(base);
  if (!client.has_value()) return "";
  auto r =
      (*client)->Send(method, target, body,
                      {{"authorization", "Bearer " + token}, {"content-type", "application/json"}});
  return r.has_value() ? std::to_string(r->status) + " " + r->body : "transport error";
}

TEST(GatewayCrashTest, KillNineLosesNoCompletedRecordAndRestartDuplicatesNone) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("atrium-crash-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string error;

  BackgroundProcess sim;
  ASSERT_TRUE(sim.Start({ATRIUM_BINARY, "engine-sim", "--listen", "127.0.0.1:0", "--model",
                         "crash-model", "--profile", "h100-llama3-8b", "--max-batch", "64"},
                        Env(), &error))
      << error;
  std::string sim_line = sim.WaitForLine("engine-sim (simulator) listening on ", 30s);
  ASSERT_FALSE(sim_line.empty()) << sim.Output();
  const std::string sim_url = sim_line.substr(0, sim_line.find(' '));

  auto start_dev = [&](BackgroundProcess& dev, std::string& api, std::string& gateway) {
    ASSERT_TRUE(dev.Start({ATRIUM_BINARY, "dev", "--data", dir.string(), "--api-listen",
                           "127.0.0.1:0", "--gateway-listen", "127.0.0.1:0"},
                          Env(), &error))
        << error;
    ASSERT_FALSE(dev.WaitForLine("Demo tenant key: ", 30s).empty()) << dev.Output();
    std::string out = dev.Output();
    api = out.substr(out.find("API: ") + 5);
    api = api.substr(0, api.find('\n'));
    gateway = out.substr(out.find("Gateway: ") + 9);
    gateway = gateway.substr(0, gateway.find('\n'));
  };

  std::string api, gateway;
  auto dev = std::make_unique<BackgroundProcess>();
  start_dev(*dev, api, gateway);
  std::string admin, key;
  std::ifstream(dir / "admin.token") >> admin;
  std::ifstream(dir / "demo.key") >> key;
  const std::string tenant = Get(api, "/api/v1/whoami", key)["tenant"]["id"];
  ASSERT_EQ(Post(api, "POST", "/api/v1/deployments", admin,
                 Json({{"model", "crash-model"},
                       {"version", "test"},
                       {"region", "local"},
                       {"latency_tier", "interactive"},
                       {"visibility", "shared"},
                       {"endpoints", {{{"url", sim_url}, {"capacity", 64}}}}})
                     .dump())
                .substr(0, 3),
            "201");
  ASSERT_EQ(Post(api, "PUT", "/api/v1/tenants/" + tenant + "/entitlements/crash-model", admin, "")
                .substr(0, 1),
            "2");
  std::this_thread::sleep_for(1s);  // the gateway's policy poll

  // Load from 8 threads, half streamed; kill -9 while it runs.
  std::mutex mu;
  std::set<std::string> completed;
  std::set<std::string> cut_off;  // streams whose client got the head, not the end
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  const int port = PortOf(gateway);
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        const bool stream = (t + i) % 2 == 0;
        // Lengths differ between threads, so that their streams do not end
        // in step (and the kill finds some in the middle).
        Seen seen = CallOnce(port, key, stream, stream ? 64 + (i + t) % 5 * 16 : 8 + (i % 5) * 8);
        std::lock_guard lock(mu);
        if (seen.complete) {
          completed.insert(seen.id);
        } else if (!seen.id.empty() && stream) {
          cut_off.insert(seen.id);
        }
      }
    });
  }
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(50ms);
    std::lock_guard lock(mu);
    if (completed.size() >= 60) break;
  }
  std::this_thread::sleep_for(300ms);  // not just as a request completes
  EXPECT_EQ(dev->Stop(SIGKILL, 10s), 128 + SIGKILL);
  stop = true;
  for (auto& c : clients) c.join();
  ASSERT_GE(completed.size(), 20u);

  // Restart; the journal ships what the killed process had not.
  dev = std::make_unique<BackgroundProcess>();
  start_dev(*dev, api, gateway);
  std::map<std::string, Json> records;
  for (int attempt = 0; attempt < 100; ++attempt) {
    records.clear();
    std::string cursor;
    size_t listed = 0;
    do {
      Json page = Get(api,
                      "/api/v1/tenants/" + tenant + "/usage?limit=500" +
                          (cursor.empty() ? "" : "&cursor=" + cursor),
                      key);
      ASSERT_TRUE(page.is_object());
      for (const auto& r : page["items"]) {
        ++listed;
        records[r["id"].get<std::string>()] = r;
      }
      cursor = page["next_cursor"].is_string() ? page["next_cursor"].get<std::string>() : "";
    } while (!cursor.empty());
    EXPECT_EQ(listed, records.size()) << "a record is stored twice";
    bool all = true;
    for (const auto& id : completed) all = all && records.count(id);
    for (const auto& id : cut_off) all = all && records.count(id);
    if (all) break;
    std::this_thread::sleep_for(100ms);
  }
  for (const auto& id : completed) EXPECT_TRUE(records.count(id)) << "lost the record of " << id;
  // Streams the kill cut off are billed from their last checkpoint (or their
  // final record, if it was written before the kill), never for more than
  // the upstream produced.
  ASSERT_GE(cut_off.size(), 1u) << "the kill cut off no stream: nothing to check";
  int interrupted = 0;

  // Every completed record matches what the upstream says it served.
  Json served =
      Json::parse(http::Client::Create(sim_url).value()->Send("GET", "/sim/served").value().body);
  std::map<std::string, Json> by_id;
  for (const auto& s : served["requests"]) by_id[s["request_id"].get<std::string>()] = s;
  int compared = 0;
  for (const auto& [id, r] : records) {
    if (r["status"] != "completed") continue;
    ASSERT_TRUE(by_id.count(id)) << "a record for a request the upstream never saw: " << id;
    EXPECT_EQ(r["output_tokens"], by_id[id]["completion_tokens"]) << id;
    EXPECT_EQ(r["input_tokens"], by_id[id]["prompt_tokens"]) << id;
    ++compared;
  }
  EXPECT_GE(compared, static_cast<int>(completed.size()));
  for (const auto& id : cut_off) {
    ASSERT_TRUE(records.count(id)) << "no record of the cut-off stream " << id;
    const Json& r = records[id];
    if (r["status"] == "interrupted") {
      ++interrupted;
      ASSERT_TRUE(by_id.count(id)) << id;
      EXPECT_LE(r["output_tokens"].get<int64_t>(), by_id[id]["completion_tokens"].get<int64_t>())
          << id;
      EXPECT_EQ(r["http_status"], 200) << id;
    } else {
      EXPECT_EQ(r["status"], "completed") << id;
    }
  }
  std::cout << "clients saw " << completed.size() << " requests complete and " << cut_off.size()
            << " streams cut off; " << records.size() << " records after the restart, " << compared
            << " completed ones matched with the upstream's count, " << interrupted
            << " interrupted\n";
  EXPECT_EQ(dev->Stop(SIGTERM, 20s), 0) << dev->Output();
  sim.Stop(SIGTERM, 10s);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace atrium

// `atrium server --config FILE` — the production mode — on both stores:
// bootstrap an admin key, start, serve, stop gracefully on SIGTERM, restart
// with the state intact. PostgreSQL runs when ATRIUM_TEST_PG_URL is set and
// must run when ATRIUM_TEST_REQUIRE_PG=1.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "http/client.h"
#include "integration/subprocess.h"
#include "store/sql.h"

namespace atrium {
namespace {

using namespace std::chrono_literals;
using testing::BackgroundProcess;
using testing::RunProcess;

std::vector<std::string> BaseEnv() {
  std::vector<std::string> env = {"PATH=/usr/bin:/bin"};
  if (const char* home = std::getenv("HOME")) env.push_back(std::string("HOME=") + home);
  return env;
}

std::string RandomSuffix() {
  std::random_device rd;
  return std::to_string(rd()) + std::to_string(rd());
}

class ServerModeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("atrium-server-" + RandomSuffix());
    std::filesystem::create_directories(dir_);
    if (GetParam() == "sqlite") {
      store_url_ = "sqlite://" + (dir_ / "atrium.db").string();
      return;
    }
    const char* pg = std::getenv("ATRIUM_TEST_PG_URL");
    if (!pg || !*pg) {
      const char* require = std::getenv("ATRIUM_TEST_REQUIRE_PG");
      if (require && std::string(require) == "1") {
        FAIL() << "ATRIUM_TEST_REQUIRE_PG=1 but ATRIUM_TEST_PG_URL is not set";
      }
      GTEST_SKIP() << "PostgreSQL not configured (ATRIUM_TEST_PG_URL)";
    }
    // A schema of its own so parallel tests never meet.
    schema_ = "t_server_" + RandomSuffix();
    auto db = sql::Database::Open(pg, 1);
    ASSERT_TRUE(db.has_value()) << db.error().message;
    ASSERT_TRUE((*db)->Exec("CREATE SCHEMA " + schema_).has_value());
    std::string base = pg;
    store_url_ = base + (base.find('?') == std::string::npos ? "?" : "&") +
                 "options=-csearch_path%3D" + schema_;
  }

  void TearDown() override {
    if (!schema_.empty()) {
      if (auto db = sql::Database::Open(std::getenv("ATRIUM_TEST_PG_URL"), 1); db.has_value()) {
        (void)(*db)->Exec("DROP SCHEMA " + schema_ + " CASCADE");
      }
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string WriteConfig(const std::string& extra = "") {
    std::string path = (dir_ / "atrium.toml").string();
    std::ofstream out(path);
    out << "[store]\nurl = \"" << store_url_ << "\"\n\n[api]\nlisten = \"127.0.0.1:0\"\n"
        << "threads = 2\n"
        << extra << "\n[auth]\nsigning_key_file = \"" << (dir_ / "signing.key").string() << "\"\n";
    return path;
  }

  std::filesystem::path dir_;
  std::string store_url_;
  std::string schema_;
};

TEST_P(ServerModeTest, BootstrapServeStopRestart) {
  std::string config = WriteConfig();
  std::string token_file = (dir_ / "admin.token").string();
  auto boot =
      RunProcess({ATRIUM_BINARY, "bootstrap-admin", "--config", config, "--out", token_file},
                 BaseEnv(), "", 60s);
  ASSERT_EQ(boot.exit_code, 0) << boot.err;
  struct stat st {};
  ASSERT_EQ(::stat(token_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  std::string token;
  std::ifstream(token_file) >> token;
  ASSERT_EQ(token.rfind("atr_", 0), 0u);
  std::map<std::string, std::string> auth = {{"authorization", "Bearer " + token}};
  // A second run does not add a key silently: it is refused, and the key
  // file stays as it was.
  auto again =
      RunProcess({ATRIUM_BINARY, "bootstrap-admin", "--config", config, "--out", token_file},
                 BaseEnv(), "", 60s);
  EXPECT_EQ(again.exit_code, 1) << again.err;
  EXPECT_NE(again.err.find("--rotate"), std::string::npos) << again.err;
  std::string unchanged;
  std::ifstream(token_file) >> unchanged;
  EXPECT_EQ(unchanged, token);

  std::string tenant_id;
  for (int run = 0; run < 2; ++run) {
    BackgroundProcess server;
    std::string error;
    ASSERT_TRUE(server.Start({ATRIUM_BINARY, "server", "--config", config}, BaseEnv(), &error))
        << error;
    std::string url = server.WaitForLine("API: ", 30s);
    ASSERT_FALSE(url.empty()) << server.Output();
    auto client = http::Client::Create(url);
    ASSERT_TRUE(client.has_value());
    auto ready = (*client)->Send("GET", "/readyz");
    ASSERT_TRUE(ready.has_value());
    EXPECT_EQ(ready->status, 200);
    if (run == 0) {
      auto created = (*client)->Send("POST", "/api/v1/tenants",
                                     R"({"name":"prod-tenant","tier":"dedicated-gpu"})", auth);
      ASSERT_TRUE(created.has_value());
      ASSERT_EQ(created->status, 201) << created->body;
      tenant_id = nlohmann::json::parse(created->body)["id"];
    } else {
      // Same store, new process: the tenant and the bootstrap key survived.
      auto got = (*client)->Send("GET", "/api/v1/tenants/" + tenant_id, "", auth);
      ASSERT_TRUE(got.has_value());
      ASSERT_EQ(got->status, 200) << got->body;
      EXPECT_EQ(nlohmann::json::parse(got->body)["tier"], "dedicated-gpu");
    }
    EXPECT_EQ(server.Stop(SIGTERM, 20s), 0) << server.Output();
  }
}

TEST_P(ServerModeTest, UnknownConfigKeyIsRejectedByName) {
  std::string config = WriteConfig("max_bodee_bytes = 5\n");
  auto r = RunProcess({ATRIUM_BINARY, "server", "--config", config}, BaseEnv(), "", 30s);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'api.max_bodee_bytes'"), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Stores, ServerModeTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace atrium

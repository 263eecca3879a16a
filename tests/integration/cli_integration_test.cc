// Starts the real `atrium dev` binary on port 0 with a temporary data
// directory and drives it with the `atrium` CLI verbs as subprocesses, the
// way an operator would: tenants, users, login, keys, suspension, eviction,
// restart, and the audit trail's verification and tamper detection.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/json_reader.h"
#include "crypto/crypto.h"
#include "http/client.h"
#include "managed_deployment.h"
#include "subprocess.h"
#include "support/wait.h"

namespace atrium {
namespace {

using namespace std::chrono_literals;
using testing::BackgroundProcess;
using testing::ProcessResult;

constexpr auto kCliTimeout = 60s;
constexpr auto kServerTimeout = 60s;
constexpr char kPassword[] = "correct-horse-battery";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Who runs a CLI command: the environment it gets, nothing else inherited.
struct As {
  std::string token;   // ATRIUM_TOKEN; "" = unset
  std::string home;    // HOME (where `login` keeps credentials)
  bool server = true;  // set ATRIUM_SERVER
};

std::string Describe(const ProcessResult& r) {
  return "exit " + std::to_string(r.exit_code) + (r.timed_out ? " (timed out)" : "") +
         "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

Json ParsedJson(const ProcessResult& r) {
  auto json = ParseJson(r.out);
  EXPECT_TRUE(json.has_value()) << "not JSON: " << Describe(r);
  return json.has_value() ? *json : Json();
}

std::set<std::string> NamesOf(const Json& items) {
  std::set<std::string> names;
  for (const auto& item : items) names.insert(item.value("name", std::string()));
  return names;
}

class CliIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ::signal(SIGPIPE, SIG_IGN); }

  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "atrium-cli-it-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    data_dir_ = root_ + "/data";
    admin_home_ = NewHome("admin");
    ASSERT_NO_FATAL_FAILURE(StartServer());
  }

  void TearDown() override {
    server_.reset();  // kills the server if a test left it running
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  // A chat completion of `model` with the demo tenant's key through the
  // gateway: its status, 0 when no answer came.
  int DemoChat(http::Client& gateway, const std::string& model) {
    std::istringstream in(ReadFile(data_dir_ + "/demo.key"));
    std::string key;
    std::getline(in, key);
    return testing::ChatStatus(gateway, key, model);
  }

  // Deletes a managed deployment and waits until no replica's job runs: a
  // replica outlives the server that started it, so a test that leaves one
  // leaves a model server holding a port.
  // `tenant`: whose jobs its replicas are (a dedicated deployment's tenant).
  void DeleteDeploymentAndItsReplicas(const std::string& dep,
                                      const std::string& tenant = "platform-serving") {
    ASSERT_EQ(Admin({"deployment", "delete", dep}).exit_code, 0);
    ASSERT_TRUE(testing_support::WaitUntil(
        [&] {
          Json jobs =
              AdminJson({"job", "list", "--tenant", tenant, "--state", "running", "-o", "json"});
          return jobs["items"].empty();
        },
        kServerTimeout));
  }

  std::string NewHome(const std::string& name) {
    std::string home = root_ + "/home-" + name;
    std::filesystem::create_directories(home);
    return home;
  }

  void StartServer() {
    server_ = std::make_unique<BackgroundProcess>();
    std::string error;
    std::vector<std::string> argv = {ATRIUM_BINARY,      "dev",          "--data",
                                     data_dir_,          "--api-listen", "127.0.0.1:0",
                                     "--gateway-listen", "127.0.0.1:0"};
    argv.insert(argv.end(), server_args_.begin(), server_args_.end());
    ASSERT_TRUE(server_->Start(argv, {"HOME=" + root_, "PATH=/usr/bin:/bin"}, &error)) << error;
    url_ = server_->WaitForLine("API: ", kServerTimeout);
    ASSERT_FALSE(url_.empty()) << "no API line from the server:\n" << server_->Output();
    ASSERT_EQ(url_.rfind("http://127.0.0.1:", 0), 0u) << url_;
    gateway_url_ = server_->WaitForLine("Gateway: ", kServerTimeout);

    std::string token_path = data_dir_ + "/admin.token";
    struct stat st {};
    ASSERT_EQ(::stat(token_path.c_str(), &st), 0) << token_path;
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    std::istringstream token_file(ReadFile(token_path));
    ASSERT_TRUE(std::getline(token_file, admin_token_));
    ASSERT_FALSE(admin_token_.empty());
  }

  // SIGTERM and wait: a graceful stop exits 0.
  int StopServer() { return server_->Stop(SIGTERM, kServerTimeout); }

  ProcessResult Run(const As& as, std::vector<std::string> args, const std::string& input = "") {
    std::vector<std::string> argv = {ATRIUM_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env = {"HOME=" + as.home, "PATH=/usr/bin:/bin"};
    if (as.server) env.push_back("ATRIUM_SERVER=" + url_);
    if (!as.token.empty()) env.push_back("ATRIUM_TOKEN=" + as.token);
    ProcessResult r = testing::RunProcess(argv, env, input, kCliTimeout);
    EXPECT_FALSE(r.timed_out) << Describe(r);
    return r;
  }
  ProcessResult Admin(std::vector<std::string> args, const std::string& input = "") {
    return Run({admin_token_, admin_home_}, std::move(args), input);
  }
  // Runs and expects exit 0; returns stdout parsed as JSON (pass -o json).
  Json AdminJson(std::vector<std::string> args, const std::string& input = "") {
    ProcessResult r = Admin(std::move(args), input);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    return ParsedJson(r);
  }

  // As the user logged in under `home`: runs `args` with `-o json` put after
  // the first two words (before a job's own command after `--`), expects
  // exit 0, returns stdout parsed.
  Json UserJson(const std::string& home, std::vector<std::string> args) {
    args.insert(args.begin() + std::min<size_t>(2, args.size()), {"-o", "json"});
    ProcessResult r = Run({"", home, false}, std::move(args));
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    return ParsedJson(r);
  }
  std::string JobState(const std::string& home, const std::string& id) {
    return UserJson(home, {"job", "get", id}).value("state", std::string());
  }
  // Waits until the job is in `want` (a failure, with the server's output,
  // after kServerTimeout).
  void WaitForJobState(const std::string& home, const std::string& id, const std::string& want) {
    std::string state;
    EXPECT_TRUE(testing_support::WaitUntil(
        [&] {
          state = JobState(home, id);
          return state == want;
        },
        kServerTimeout))
        << id << " is " << state << ", not " << want << "\n"
        << server_->Output();
  }

  // The jobs tests' two tenants: acme, `gpus` H100s guaranteed, with alice
  // as its tenant admin, and globex with bob. Returns their HOMEs.
  struct TwoTenantHomes {
    std::string alice;
    std::string bob;
  };
  TwoTenantHomes AcmeWithGpusAndGlobex(int gpus) {
    AdminJson({"tenant", "create", "acme", "-o", "json"});
    AdminJson({"tenant", "create", "globex", "-o", "json"});
    EXPECT_EQ(
        Admin({"quota", "set", "acme", "--model", "H100-80GB", "--guarantee", std::to_string(gpus)})
            .exit_code,
        0);
    return {LoginAsNewTenantAdmin("acme", "alice"), LoginAsNewTenantAdmin("globex", "bob")};
  }

  // Creates a tenant admin and logs in as it with a fresh HOME; returns that HOME.
  std::string LoginAsNewTenantAdmin(const std::string& tenant, const std::string& username) {
    ProcessResult created = Admin({"user", "create", username, "--tenant", tenant, "--role",
                                   "tenant-admin", "--password-stdin"},
                                  std::string(kPassword) + "\n");
    EXPECT_EQ(created.exit_code, 0) << Describe(created);
    std::string home = NewHome(username);
    ProcessResult login = Run(
        {"", home, /*server=*/false},
        {"login", "--server", url_, "--tenant", tenant, "--username", username, "--password-stdin"},
        std::string(kPassword) + "\n");
    EXPECT_EQ(login.exit_code, 0) << Describe(login);
    EXPECT_NE(login.out.find("Logged in"), std::string::npos) << login.out;
    return home;
  }

  std::string root_;
  std::string data_dir_;
  std::string admin_home_;
  std::string url_;
  std::string gateway_url_;
  std::string admin_token_;
  std::vector<std::string> server_args_;  // after the default `dev` arguments
  std::unique_ptr<BackgroundProcess> server_;
};

TEST_F(CliIntegrationTest, TenantsUsersKeysSuspensionAndEviction) {
  // --- tenants: create, label filter, pagination, get by name, update
  Json acme = AdminJson({"tenant", "create", "acme", "--display-name", "Acme Corp", "--tier",
                         "dedicated-gpu", "--region", "eu-west", "--region", "us-east", "--weight",
                         "5", "--label", "env=prod", "--label", "team=ml", "-o", "json"});
  const std::string acme_id = acme.value("id", "");
  ASSERT_FALSE(acme_id.empty());
  EXPECT_EQ(acme["name"], "acme");
  EXPECT_EQ(acme["state"], "active");
  EXPECT_EQ(acme["tier"], "dedicated-gpu");
  EXPECT_EQ(acme["weight"], 5);
  EXPECT_EQ(acme["regions"], Json::array({"eu-west", "us-east"}));
  EXPECT_EQ(acme["labels"], (Json{{"env", "prod"}, {"team", "ml"}}));

  ProcessResult globex = Admin({"tenant", "create", "globex", "--label", "env=dev"});
  ASSERT_EQ(globex.exit_code, 0) << Describe(globex);
  EXPECT_NE(globex.out.find("name:"), std::string::npos) << globex.out;
  EXPECT_NE(globex.out.find("globex"), std::string::npos) << globex.out;
  AdminJson({"tenant", "create", "initech", "--label", "env=prod", "-o", "json"});

  Json prod = AdminJson({"tenant", "list", "--label", "env=prod", "--all", "-o", "json"});
  EXPECT_EQ(NamesOf(prod), (std::set<std::string>{"acme", "initech"}));

  Json first = AdminJson({"tenant", "list", "--limit", "1", "-o", "json"});
  ASSERT_EQ(first["items"].size(), 1u);
  ASSERT_TRUE(first["next_cursor"].is_string()) << first.dump();
  Json second = AdminJson({"tenant", "list", "--limit", "1", "--cursor",
                           first["next_cursor"].get<std::string>(), "-o", "json"});
  ASSERT_EQ(second["items"].size(), 1u);
  EXPECT_NE(second["items"][0]["id"], first["items"][0]["id"]);
  Json all = AdminJson({"tenant", "list", "--limit", "1", "--all", "-o", "json"});
  // "demo" is the tenant `atrium dev` creates for its simulated models.
  EXPECT_EQ(NamesOf(all), (std::set<std::string>{"acme", "demo", "globex", "initech"}));

  ProcessResult table = Admin({"tenant", "list"});
  ASSERT_EQ(table.exit_code, 0) << Describe(table);
  EXPECT_EQ(table.out.rfind("ID ", 0), 0u) << table.out;
  EXPECT_NE(table.out.find("NAME"), std::string::npos);
  EXPECT_NE(table.out.find("STATE"), std::string::npos);
  EXPECT_NE(table.out.find(acme_id + "  acme "), std::string::npos) << table.out;

  Json by_name = AdminJson({"tenant", "get", "acme", "-o", "json"});
  EXPECT_EQ(by_name["id"], acme_id);
  Json updated = AdminJson(
      {"tenant", "update", "acme", "--weight", "7", "--label", "tier=gold", "-o", "json"});
  EXPECT_EQ(updated["weight"], 7);
  EXPECT_EQ(updated["labels"], (Json{{"env", "prod"}, {"team", "ml"}, {"tier", "gold"}}));

  // --- a tenant admin logs in; the token lands in a private credentials file
  std::string alice_home = LoginAsNewTenantAdmin("acme", "alice");
  std::string credentials = alice_home + "/.config/atrium/credentials";
  struct stat st {};
  ASSERT_EQ(::stat(credentials.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const As alice{"", alice_home, /*server=*/false};  // server and token from the file

  ProcessResult me = Run(alice, {"whoami", "-o", "json"});
  ASSERT_EQ(me.exit_code, 0) << Describe(me);
  Json me_json = ParsedJson(me);
  EXPECT_EQ(me_json["user"]["username"], "alice");
  EXPECT_EQ(me_json["role"], "tenant-admin");
  EXPECT_EQ(me_json["tenant"]["id"], acme_id);
  ProcessResult me_table = Run(alice, {"whoami"});
  EXPECT_NE(me_table.out.find("acme (" + acme_id + ")"), std::string::npos) << me_table.out;

  ProcessResult users = Run(alice, {"user", "list", "-o", "json"});
  ASSERT_EQ(users.exit_code, 0) << Describe(users);
  ASSERT_EQ(ParsedJson(users)["items"].size(), 1u);

  // --- an API key: created once, used, revoked
  ProcessResult shown = Run(alice, {"key", "create", "laptop"});
  ASSERT_EQ(shown.exit_code, 0) << Describe(shown);
  EXPECT_NE(shown.out.find("shown only this once"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("\natr_"), std::string::npos) << shown.out;

  ProcessResult created_key =
      Run(alice, {"key", "create", "ci", "--expires-in", "30d", "-o", "json"});
  ASSERT_EQ(created_key.exit_code, 0) << Describe(created_key);
  Json key = ParsedJson(created_key);
  const std::string key_text = key.value("key", "");
  const std::string key_id = key.value("id", "");
  ASSERT_EQ(key_text.rfind("atr_", 0), 0u) << key.dump();
  EXPECT_TRUE(key["expires_at"].is_string());
  const As ci{key_text, NewHome("ci")};

  ProcessResult by_key = Run(ci, {"whoami", "-o", "json"});
  ASSERT_EQ(by_key.exit_code, 0) << Describe(by_key);
  EXPECT_EQ(ParsedJson(by_key)["credential"], "key:" + key_id);

  ProcessResult keys = Run(alice, {"key", "list", "-o", "json"});
  ASSERT_EQ(keys.exit_code, 0) << Describe(keys);
  EXPECT_EQ(ParsedJson(keys)["items"].size(), 2u);

  ProcessResult revoked = Run(alice, {"key", "revoke", key_id, "-o", "json"});
  ASSERT_EQ(revoked.exit_code, 0) << Describe(revoked);
  EXPECT_EQ(ParsedJson(revoked)["state"], "revoked");
  ProcessResult rejected = Run(ci, {"whoami"});
  EXPECT_EQ(rejected.exit_code, 1) << Describe(rejected);
  EXPECT_EQ(rejected.err.rfind("atrium: ", 0), 0u) << rejected.err;
  EXPECT_NE(rejected.err.find("(unauthenticated, HTTP 401, request "), std::string::npos)
      << rejected.err;

  // --- suspension locks the tenant out at once; resuming lets it back
  ProcessResult suspended = Admin({"tenant", "suspend", "acme", "-o", "json"});
  ASSERT_EQ(suspended.exit_code, 0) << Describe(suspended);
  EXPECT_EQ(ParsedJson(suspended)["state"], "suspended");
  ProcessResult locked_out = Run(alice, {"whoami"});
  EXPECT_EQ(locked_out.exit_code, 1) << Describe(locked_out);
  EXPECT_NE(locked_out.err.find("unauthenticated"), std::string::npos) << locked_out.err;
  Json listed = AdminJson({"tenant", "list", "--state", "suspended", "-o", "json"});
  EXPECT_EQ(NamesOf(listed["items"]), std::set<std::string>{"acme"});

  ASSERT_EQ(Admin({"tenant", "resume", "acme"}).exit_code, 0);
  ProcessResult back = Run(alice, {"whoami"});
  EXPECT_EQ(back.exit_code, 0) << Describe(back);

  // --- eviction: confirmation required, then the tenant and its people are gone
  ProcessResult unconfirmed = Admin({"tenant", "evict", "acme"});
  EXPECT_EQ(unconfirmed.exit_code, 2) << Describe(unconfirmed);
  EXPECT_NE(unconfirmed.err.find("--yes"), std::string::npos) << unconfirmed.err;
  EXPECT_EQ(AdminJson({"tenant", "get", acme_id, "-o", "json"})["state"], "active");

  Json evicted = AdminJson({"tenant", "evict", "acme", "--yes", "-o", "json"});
  EXPECT_EQ(evicted["removed"]["users"], 1);
  EXPECT_EQ(evicted["removed"]["api_keys"], 2);
  // Staff still find it by id, as evicted (its usage and allocation
  // history are kept); by name it is gone.
  EXPECT_EQ(AdminJson({"tenant", "get", acme_id, "-o", "json"})["state"], "evicted");
  EXPECT_EQ(Admin({"tenant", "get", "acme"}).exit_code, 1);
  EXPECT_EQ(Run(alice, {"whoami"}).exit_code, 1);

  // --- the name is free again; the new tenant inherits nothing
  Json reborn = AdminJson({"tenant", "create", "acme", "-o", "json"});
  EXPECT_NE(reborn["id"], acme_id);
  Json no_users = AdminJson({"user", "list", "--tenant", "acme", "-o", "json"});
  EXPECT_TRUE(no_users["items"].empty()) << no_users.dump();
  Json no_keys = AdminJson({"key", "list", "--tenant", "acme", "-o", "json"});
  EXPECT_TRUE(no_keys["items"].empty()) << no_keys.dump();
  ProcessResult old_login = Run(
      {"", NewHome("again"), false},
      {"login", "--server", url_, "--tenant", "acme", "--username", "alice", "--password-stdin"},
      std::string(kPassword) + "\n");
  EXPECT_EQ(old_login.exit_code, 1) << Describe(old_login);

  // --- logout ends the session and forgets the file
  std::string bob_home = LoginAsNewTenantAdmin("globex", "bob");
  ProcessResult out = Run({"", bob_home, false}, {"logout"});
  EXPECT_EQ(out.exit_code, 0) << Describe(out);
  EXPECT_FALSE(std::filesystem::exists(bob_home + "/.config/atrium/credentials"));
  ProcessResult after = Run({"", bob_home, true}, {"whoami"});
  EXPECT_EQ(after.exit_code, 2) << Describe(after);
  EXPECT_NE(after.err.find("not logged in"), std::string::npos) << after.err;
}

TEST_F(CliIntegrationTest, UsersAndKeysInATenantAndOnThePlatform) {
  ASSERT_EQ(Admin({"tenant", "create", "acme", "--label", "a=1", "--label", "b=2"}).exit_code, 0);
  Json relabeled = AdminJson(
      {"tenant", "update", "acme", "--remove-label", "a", "--label", "c=3", "-o", "json"});
  EXPECT_EQ(relabeled["labels"], (Json{{"b", "2"}, {"c", "3"}}));

  Json bob = AdminJson({"user", "create", "bob", "--tenant", "acme", "--role", "tenant-member",
                        "--email", "bob@example.com", "--password-stdin", "-o", "json"},
                       std::string(kPassword) + "\n");
  EXPECT_EQ(bob["kind"], "human");
  Json got = AdminJson({"user", "get", "bob", "--tenant", "acme", "-o", "json"});
  EXPECT_EQ(got["id"], bob["id"]);
  EXPECT_EQ(got["email"], "bob@example.com");
  Json changed = AdminJson({"user", "update", bob["id"].get<std::string>(), "--tenant", "acme",
                            "--role", "tenant-viewer", "--display-name", "Bob B", "-o", "json"});
  EXPECT_EQ(changed["role"], "tenant-viewer");
  EXPECT_EQ(changed["display_name"], "Bob B");

  Json svc = AdminJson({"user", "create", "svc", "--tenant", "acme", "--role", "tenant-member",
                        "--service", "-o", "json"});
  EXPECT_EQ(svc["kind"], "service");
  Json key = AdminJson({"key", "create", "batch", "--tenant", "acme", "--owner", "svc", "--scope",
                        "llama-3", "--scope", "mistral", "-o", "json"});
  EXPECT_EQ(key["owner_user_id"], svc["id"]);
  EXPECT_EQ(key["scopes"], Json::array({"llama-3", "mistral"}));
  Json svc_keys = AdminJson({"key", "list", "--tenant", "acme", "--owner", "svc", "-o", "json"});
  ASSERT_EQ(svc_keys["items"].size(), 1u);

  auto login_bob = [&](const std::string& password) {
    return Run({"", NewHome("bob"), false},
               {"login", "--server", url_, "--tenant", "acme", "-u", "bob", "--password-stdin"},
               password + "\n");
  };
  ASSERT_EQ(Admin({"user", "update", "bob", "--tenant", "acme", "--state", "disabled"}).exit_code,
            0);
  EXPECT_EQ(login_bob(kPassword).exit_code, 1);
  const std::string new_password = "another-long-password";
  ASSERT_EQ(
      Admin({"user", "update", "bob", "--tenant", "acme", "--state", "active", "--password-stdin"},
            new_password + "\n")
          .exit_code,
      0);
  EXPECT_EQ(login_bob(kPassword).exit_code, 1);
  ProcessResult relogin = login_bob(new_password);
  EXPECT_EQ(relogin.exit_code, 0) << Describe(relogin);

  ASSERT_EQ(Admin({"user", "delete", "bob", "--tenant", "acme"}).exit_code, 0);
  ProcessResult deleted = Admin({"user", "get", "bob", "--tenant", "acme"});
  EXPECT_EQ(deleted.exit_code, 1) << Describe(deleted);
  EXPECT_NE(deleted.err.find("no user named 'bob'"), std::string::npos) << deleted.err;

  // Platform staff without --tenant manage the platform's own users.
  Json staff = AdminJson({"user", "list", "-o", "json"});
  ASSERT_EQ(staff["items"].size(), 1u);
  EXPECT_TRUE(staff["items"][0]["tenant_id"].is_null());
  Json ops = AdminJson(
      {"user", "create", "ops", "--role", "platform-operator", "--password-stdin", "-o", "json"},
      std::string(kPassword) + "\n");
  EXPECT_TRUE(ops["tenant_id"].is_null());
  EXPECT_EQ(AdminJson({"user", "list", "--all", "-o", "json"}).size(), 2u);
  ProcessResult ops_login =
      Run({"", NewHome("ops"), false}, {"login", "--server", url_, "-u", "ops", "--password-stdin"},
          std::string(kPassword) + "\n");
  EXPECT_EQ(ops_login.exit_code, 0) << Describe(ops_login);
}

TEST_F(CliIntegrationTest, BadInputAndMissingCredentialsFailClearly) {
  ProcessResult bad_name = Admin({"tenant", "create", "Bad Name!"});
  EXPECT_EQ(bad_name.exit_code, 1) << Describe(bad_name);
  EXPECT_NE(bad_name.err.find("(invalid_argument, HTTP 400, request "), std::string::npos)
      << bad_name.err;

  ProcessResult no_token = Run({"", NewHome("nobody")}, {"tenant", "list"});
  EXPECT_NE(no_token.exit_code, 0);
  EXPECT_NE(no_token.err.find("not logged in to " + url_), std::string::npos) << no_token.err;
  EXPECT_NE(no_token.err.find("ATRIUM_TOKEN"), std::string::npos) << no_token.err;

  ProcessResult no_server = Run({admin_token_, NewHome("lost"), false}, {"tenant", "list"});
  EXPECT_NE(no_server.exit_code, 0);
  EXPECT_NE(no_server.err.find("no server"), std::string::npos) << no_server.err;

  ProcessResult bad_token = Run({"atr_nope_nope", admin_home_}, {"whoami"});
  EXPECT_EQ(bad_token.exit_code, 1) << Describe(bad_token);
  EXPECT_NE(bad_token.err.find("unauthenticated"), std::string::npos) << bad_token.err;

  ProcessResult bad_label = Admin({"tenant", "create", "x", "--label", "nolabel"});
  EXPECT_EQ(bad_label.exit_code, 2) << Describe(bad_label);
  EXPECT_NE(bad_label.err.find("key=value"), std::string::npos) << bad_label.err;

  ProcessResult bad_duration = Admin({"key", "create", "k", "--expires-in", "10x"});
  EXPECT_EQ(bad_duration.exit_code, 2) << Describe(bad_duration);
  EXPECT_NE(bad_duration.err.find("bad duration"), std::string::npos) << bad_duration.err;

  ProcessResult bad_format = Admin({"tenant", "list", "-o", "yaml"});
  EXPECT_NE(bad_format.exit_code, 0) << Describe(bad_format);

  ProcessResult missing = Admin({"tenant", "get", "no-such-tenant"});
  EXPECT_EQ(missing.exit_code, 1) << Describe(missing);
  EXPECT_NE(missing.err.find("no tenant named 'no-such-tenant'"), std::string::npos) << missing.err;

  ASSERT_EQ(Admin({"tenant", "create", "acme"}).exit_code, 0);
  ProcessResult wrong_password =
      Run({"", NewHome("guess"), false},
          {"login", "--server", url_, "--tenant", "acme", "--username", "x", "--password-stdin"},
          "not-the-password\n");
  EXPECT_EQ(wrong_password.exit_code, 1) << Describe(wrong_password);
  EXPECT_NE(wrong_password.err.find("unauthenticated"), std::string::npos) << wrong_password.err;

  ProcessResult no_password =
      Admin({"user", "create", "carol", "--tenant", "acme", "--role", "tenant-member"});
  EXPECT_EQ(no_password.exit_code, 2) << Describe(no_password);
  EXPECT_NE(no_password.err.find("--password-stdin"), std::string::npos) << no_password.err;

  ProcessResult unreachable =
      Run({admin_token_, admin_home_, false}, {"--server", "http://127.0.0.1:1", "whoami"});
  EXPECT_EQ(unreachable.exit_code, 1) << Describe(unreachable);
  EXPECT_NE(unreachable.err.find("cannot reach http://127.0.0.1:1"), std::string::npos)
      << unreachable.err;
}

TEST_F(CliIntegrationTest, RestartKeepsDataAndTheAdminToken) {
  Json tenant = AdminJson({"tenant", "create", "persist", "--label", "keep=yes", "-o", "json"});
  const std::string token_before = ReadFile(data_dir_ + "/admin.token");

  ASSERT_EQ(StopServer(), 0) << server_->Output();
  ASSERT_NO_FATAL_FAILURE(StartServer());

  EXPECT_EQ(ReadFile(data_dir_ + "/admin.token"), token_before);
  Json again = AdminJson({"tenant", "get", "persist", "-o", "json"});
  EXPECT_EQ(again["id"], tenant["id"]);
  EXPECT_EQ(again["labels"], (Json{{"keep", "yes"}}));
}

TEST_F(CliIntegrationTest, AuditVerifyFindsTruncationAndTamperingInTheStore) {
  ASSERT_EQ(Admin({"tenant", "create", "acme"}).exit_code, 0);
  ASSERT_EQ(Admin({"tenant", "suspend", "acme"}).exit_code, 0);
  ASSERT_EQ(Admin({"tenant", "resume", "acme"}).exit_code, 0);
  ASSERT_EQ(Admin({"tenant", "create", "globex"}).exit_code, 0);
  ASSERT_EQ(Admin({"tenant", "update", "globex", "--weight", "2"}).exit_code, 0);

  ProcessResult online = Admin({"audit", "verify"});
  EXPECT_EQ(online.exit_code, 0) << Describe(online);
  EXPECT_EQ(online.out.rfind("audit chain OK: ", 0), 0u) << online.out;
  Json page = AdminJson({"audit", "list", "--limit", "2", "-o", "json"});
  EXPECT_EQ(page["items"].size(), 2u);
  EXPECT_EQ(page["items"][0]["seq"], 1);
  ProcessResult listed = Admin({"audit", "list", "--all"});
  EXPECT_NE(listed.out.find("tenant.suspend"), std::string::npos) << listed.out;
  // `atrium dev`'s own set-up is in the trail too: the simulated deployment
  // (platform chain), the demo tenant, its account, key and entitlement.
  for (const char* action :
       {"deployment.create", "tenant.create", "user.create", "key.create", "entitlement.grant"}) {
    EXPECT_NE(listed.out.find(action), std::string::npos) << action << "\n" << listed.out;
  }

  ASSERT_EQ(StopServer(), 0) << server_->Output();
  ProcessResult stored = Admin({"audit", "verify", "--data", data_dir_});
  EXPECT_EQ(stored.exit_code, 0) << Describe(stored);
  // 5 records of this test in 2 chains, and atrium dev's 7 in 2 more (its
  // bootstrap admin account and key among them).
  EXPECT_EQ(stored.out, "audit chain OK: 12 records in 4 chains\n");
  // The server signed the trail's final state when it stopped.
  EXPECT_NE(stored.err.find("verified with the pinned key"), std::string::npos) << stored.err;
  ProcessResult by_url =
      Admin({"audit", "verify", "--store", "sqlite://" + data_dir_ + "/atrium.db"});
  EXPECT_EQ(by_url.exit_code, 0) << Describe(by_url);

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((data_dir_ + "/atrium.db").c_str(), &db), SQLITE_OK);
  auto exec = [db](const char* sql) {
    char* error = nullptr;
    int rc = sqlite3_exec(db, sql, nullptr, nullptr, &error);
    std::string message = error ? error : "";
    sqlite3_free(error);
    return rc == SQLITE_OK ? std::string() : message;
  };
  // Removing the newest record leaves every link intact; only the chain
  // heads show it.
  EXPECT_EQ(exec("DELETE FROM audit_log WHERE seq = (SELECT MAX(seq) FROM audit_log)"), "");
  ProcessResult truncated = Admin({"audit", "verify", "--data", data_dir_});
  EXPECT_EQ(truncated.exit_code, 1) << Describe(truncated);
  EXPECT_NE(truncated.out.find("records removed from the tail"), std::string::npos)
      << truncated.out;

  // Regression: someone with the database rewinds the counter and the head
  // to match. The store then agrees with itself; only the checkpoint signed
  // outside it shows the rewind.
  EXPECT_EQ(exec("UPDATE audit_counter SET last_seq = (SELECT MAX(seq) FROM audit_log)"), "");
  EXPECT_EQ(exec("UPDATE audit_heads SET chain_seq = (SELECT MAX(chain_seq) FROM audit_log a "
                 "WHERE a.chain = audit_heads.chain), hash = (SELECT hash FROM audit_log a WHERE "
                 "a.chain = audit_heads.chain ORDER BY chain_seq DESC LIMIT 1)"),
            "");
  ProcessResult unanchored =
      Admin({"audit", "verify", "--store", "sqlite://" + data_dir_ + "/atrium.db"});
  EXPECT_EQ(unanchored.exit_code, 0) << "without the checkpoint the rewind is invisible\n"
                                     << Describe(unanchored);
  ProcessResult rewound = Admin({"audit", "verify", "--data", data_dir_});
  EXPECT_EQ(rewound.exit_code, 1) << Describe(rewound);
  EXPECT_NE(rewound.out.find("signed checkpoint"), std::string::npos) << rewound.out;
  // The server will not run on a rewound trail either.
  ProcessResult refused =
      testing::RunProcess({ATRIUM_BINARY, "dev", "--data", data_dir_, "--api-listen", "127.0.0.1:0",
                           "--gateway-listen", "127.0.0.1:0"},
                          {"HOME=" + root_, "PATH=/usr/bin:/bin"}, "", kServerTimeout);
  EXPECT_EQ(refused.exit_code, 1) << Describe(refused);
  EXPECT_NE(refused.err.find("no longer reaches the checkpoint"), std::string::npos) << refused.err;

  EXPECT_EQ(exec("UPDATE audit_log SET action='x' WHERE seq=3"), "");
  sqlite3_close(db);
  ProcessResult tampered = Admin({"audit", "verify", "--data", data_dir_});
  EXPECT_EQ(tampered.exit_code, 1) << Describe(tampered);
  EXPECT_NE(tampered.out.find("audit chain BROKEN at record seq=3 "), std::string::npos)
      << tampered.out;

  ProcessResult nowhere = Admin({"audit", "verify", "--data", root_ + "/nothing"});
  EXPECT_EQ(nowhere.exit_code, 1) << Describe(nowhere);
  EXPECT_NE(nowhere.err.find("no store at"), std::string::npos) << nowhere.err;
  EXPECT_FALSE(std::filesystem::exists(root_ + "/nothing"));
}

TEST_F(CliIntegrationTest, TenantAdminExportVerifiesOnItsOwn) {
  ASSERT_EQ(Admin({"tenant", "create", "acme"}).exit_code, 0);
  ASSERT_EQ(Admin({"tenant", "create", "globex"}).exit_code, 0);
  std::string alice_home = LoginAsNewTenantAdmin("acme", "alice");
  const As alice{"", alice_home, false};
  ASSERT_EQ(Run(alice, {"key", "create", "ci"}).exit_code, 0);
  // Another tenant's trail is not hers to read.
  EXPECT_EQ(Run(alice, {"audit", "list", "--tenant", "globex"}).exit_code, 1);

  std::string file = root_ + "/acme-audit.jsonl";
  ProcessResult exported = Run(alice, {"audit", "export", "--out", file});
  ASSERT_EQ(exported.exit_code, 0) << Describe(exported);
  std::string text = ReadFile(file);
  std::istringstream lines(text);
  std::string line;
  int count = 0;
  std::string records_text, summary_line;
  while (std::getline(lines, line)) {
    auto record = ParseJson(line);
    ASSERT_TRUE(record.has_value()) << line;
    if (record->contains("audit_export")) {
      // The last line: her chain's head and its signed checkpoint, no other.
      summary_line = line;
      Json summary = (*record)["audit_export"];
      EXPECT_FALSE(summary.contains("last_seq")) << line;
      ASSERT_EQ(summary["heads"].size(), 1u) << line;
      continue;
    }
    EXPECT_TRUE(summary_line.empty()) << "a record after the summary line";
    EXPECT_EQ((*record)["chain"], (*record)["tenant_id"]) << line;
    records_text += line + "\n";
    ++count;
  }
  ASSERT_FALSE(summary_line.empty()) << text;
  EXPECT_GE(count, 4);  // tenant.create, user.create, auth.login, key.create

  ProcessResult verified = Run(alice, {"audit", "verify", "--file", file});
  EXPECT_EQ(verified.exit_code, 0) << Describe(verified);
  EXPECT_EQ(verified.out, "audit chain OK: " + std::to_string(count) + " records in 1 chains\n");
  // Offline, with the operator's published key pinned.
  std::string public_key = ReadFile(data_dir_ + "/audit-signing.key.pub");
  public_key.erase(public_key.find_last_not_of("\n") + 1);
  ProcessResult pinned =
      Run(alice, {"audit", "verify", "--file", file, "--public-key", public_key});
  EXPECT_EQ(pinned.exit_code, 0) << Describe(pinned);
  EXPECT_NE(pinned.err.find("verified with the pinned key"), std::string::npos) << pinned.err;

  // Regression: an export whose last records were cut off verified. Cut
  // anywhere, it loses its summary line; with the summary kept, the
  // missing records show against it.
  std::ofstream(root_ + "/cut.jsonl") << text.substr(0, text.find('\n') + 1);
  ProcessResult cut = Run(alice, {"audit", "verify", "--file", root_ + "/cut.jsonl"});
  EXPECT_EQ(cut.exit_code, 1) << Describe(cut);
  EXPECT_NE(cut.out.find("no summary line"), std::string::npos) << cut.out;
  std::string without_last =
      records_text.substr(0, records_text.rfind('\n', records_text.size() - 2) + 1);
  std::ofstream(root_ + "/short.jsonl") << without_last << summary_line << "\n";
  ProcessResult shortened = Run(alice, {"audit", "verify", "--file", root_ + "/short.jsonl"});
  EXPECT_EQ(shortened.exit_code, 1) << Describe(shortened);
  EXPECT_NE(shortened.out.find("records removed from the tail"), std::string::npos)
      << shortened.out;
  ProcessResult online = Run(alice, {"audit", "verify", "-o", "json"});
  EXPECT_EQ(online.exit_code, 0) << Describe(online);
  EXPECT_EQ(ParsedJson(online)["ok"], true);

  // The operator's export of the same tenant is the same chain.
  ProcessResult by_admin = Admin({"audit", "export", "--tenant", "acme"});
  ASSERT_EQ(by_admin.exit_code, 0) << Describe(by_admin);
  EXPECT_EQ(by_admin.out.substr(0, records_text.size()), records_text);

  // Editing one field of the export breaks it there.
  std::string edited = text;
  size_t at = edited.find("\"action\":\"user.create\"");
  ASSERT_NE(at, std::string::npos) << text;
  edited.replace(at, std::string("\"action\":\"user.create\"").size(),
                 "\"action\":\"user.delete\"");
  std::ofstream(root_ + "/edited.jsonl") << edited;
  ProcessResult broken = Run(alice, {"audit", "verify", "--file", root_ + "/edited.jsonl"});
  EXPECT_EQ(broken.exit_code, 1) << Describe(broken);
  EXPECT_NE(broken.out.find("audit chain BROKEN at record seq="), std::string::npos) << broken.out;

  ProcessResult everything = Admin({"audit", "export", "--out", root_ + "/all.jsonl"});
  ASSERT_EQ(everything.exit_code, 0) << Describe(everything);
  ProcessResult all_ok = Admin({"audit", "verify", "--file", root_ + "/all.jsonl"});
  EXPECT_EQ(all_ok.exit_code, 0) << Describe(all_ok);

  // Regression: the operator's export with one tenant's whole chain taken
  // out verified.
  std::string acme_id = ParseJson(records_text.substr(0, records_text.find('\n')))
                            .value()["tenant_id"]
                            .get<std::string>();
  std::istringstream all_lines(ReadFile(root_ + "/all.jsonl"));
  std::string kept;
  while (std::getline(all_lines, line)) {
    if (line.find("\"tenant_id\":\"" + acme_id + "\"") == std::string::npos) kept += line + "\n";
  }
  std::ofstream(root_ + "/no-acme.jsonl") << kept;
  ProcessResult no_acme = Admin({"audit", "verify", "--file", root_ + "/no-acme.jsonl"});
  EXPECT_EQ(no_acme.exit_code, 1) << Describe(no_acme);
  EXPECT_NE(no_acme.out.find("gap in the global sequence"), std::string::npos) << no_acme.out;
}

// Environment templates end to end: the operator publishes one with node
// requirements, a tenant lists it beside its own, reads one version exactly,
// and retires its own; another tenant sees none of the first one's.
TEST_F(CliIntegrationTest, EnvironmentTemplatesPublishListGetDelete) {
  const std::string digest = "sha256:" + std::string(64, 'a');
  Json platform = AdminJson({"template", "publish", "cuda-base", "--digest", digest, "--env",
                             "PYTHONUNBUFFERED=1", "--min-driver", "550.54.15", "--min-cuda",
                             "12.4", "--gpu-model", "H100-80GB", "-o", "json"});
  EXPECT_EQ(platform["reference"], "cuda-base@1") << platform.dump();
  EXPECT_EQ(platform["owner"], "platform");

  AdminJson({"tenant", "create", "acme", "-o", "json"});
  AdminJson({"tenant", "create", "globex", "-o", "json"});
  As alice{"", LoginAsNewTenantAdmin("acme", "alice"), true};
  As bob{"", LoginAsNewTenantAdmin("globex", "bob"), true};
  ProcessResult mine =
      Run(alice, {"template", "publish", "mine", "--digest", digest, "--env", "HF_HOME=/work/hf"});
  EXPECT_EQ(mine.exit_code, 0) << Describe(mine);
  EXPECT_NE(mine.out.find("Published mine@1."), std::string::npos) << mine.out;
  ProcessResult again = Run(alice, {"template", "publish", "mine", "--digest", digest});
  EXPECT_EQ(again.exit_code, 0) << Describe(again);

  ProcessResult list = Run(alice, {"template", "list"});
  EXPECT_EQ(list.exit_code, 0) << Describe(list);
  EXPECT_NE(list.out.find("cuda-base@1"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("driver>=550.54.15 cuda>=12.4 H100-80GB"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("mine@2"), std::string::npos) << list.out;
  ProcessResult exact = Run(alice, {"template", "get", "mine@1"});
  EXPECT_EQ(exact.exit_code, 0) << Describe(exact);
  EXPECT_NE(exact.out.find("env HF_HOME: /work/hf"), std::string::npos) << exact.out;

  ProcessResult bob_list = Run(bob, {"template", "list"});
  EXPECT_EQ(bob_list.exit_code, 0) << Describe(bob_list);
  EXPECT_EQ(bob_list.out.find("mine@"), std::string::npos) << bob_list.out;
  ProcessResult bob_get = Run(bob, {"template", "get", "mine"});
  EXPECT_EQ(bob_get.exit_code, 1) << Describe(bob_get);
  ProcessResult traversal = Run(bob, {"template", "publish", "x", "--digest", "../../etc"});
  EXPECT_EQ(traversal.exit_code, 1) << Describe(traversal);
  EXPECT_NE(traversal.err.find("rootfs_digest"), std::string::npos) << traversal.err;

  ProcessResult retired = Run(alice, {"template", "delete", "mine@2"});
  EXPECT_EQ(retired.exit_code, 0) << Describe(retired);
  EXPECT_NE(retired.out.find("Retired mine@2."), std::string::npos) << retired.out;
  Json latest = ParsedJson(Run(alice, {"template", "get", "mine", "-o", "json"}));
  EXPECT_EQ(latest["version"], 1) << latest.dump();
}

// GPU capacity end to end: a simulated fleet from --fleet, quotas, a
// project, allocations of every kind, a queued one explained, release, the
// fleet views, and a restart that brings the same placements back.
TEST_F(CliIntegrationTest, FleetQuotasAllocationsAndRestart) {
  constexpr char kFleet[] = "2xH100-80GBx8,1xA100-80GBx8,2xL40Sx4";
  ASSERT_EQ(StopServer(), 0) << server_->Output();
  data_dir_ = root_ + "/fleet-data";
  server_args_ = {"--fleet", kFleet};
  ASSERT_NO_FATAL_FAILURE(StartServer());

  AdminJson({"tenant", "create", "acme", "-o", "json"});
  for (std::vector<std::string> quota :
       {std::vector<std::string>{"--model", "H100-80GB", "--kind", "gpu", "--guarantee", "8"},
        {"--model", "a100-80gb", "--kind", "mig", "--guarantee", "1"},
        {"--model", "L40S", "--kind", "share", "--guarantee", "0.5", "--limit", "1"},
        {"--model", "L40S", "--kind", "node", "--guarantee", "4"}}) {
    quota.insert(quota.begin(), {"quota", "set", "acme"});
    ProcessResult set = Admin(quota);
    EXPECT_EQ(set.exit_code, 0) << Describe(set);
  }
  Json quotas = AdminJson({"quota", "get", "acme", "-o", "json"});
  EXPECT_EQ(quotas["items"].size(), 4u) << quotas.dump();

  const std::string home = LoginAsNewTenantAdmin("acme", "alice");
  As alice{"", home, true};
  auto alice_json = [&](std::vector<std::string> args) {
    args.push_back("-o");
    args.push_back("json");
    ProcessResult r = Run(alice, args);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    return ParsedJson(r);
  };
  Json project = alice_json({"project", "create", "research"});
  EXPECT_EQ(project["name"], "research");
  alice_json({"project", "quota", "research", "--model", "H100-80GB", "--guarantee", "4"});
  ProcessResult projects = Run(alice, {"project", "list"});
  EXPECT_EQ(projects.exit_code, 0) << Describe(projects);
  EXPECT_NE(projects.out.find("H100-80GB/gpu=4/4"), std::string::npos) << projects.out;
  // A row removed: the project is limited by the tenant's quota only; then
  // set again for what follows.
  Json cleared = alice_json({"project", "quota-clear", "research", "--model", "H100-80GB"});
  EXPECT_TRUE(cleared["quotas"].empty()) << cleared.dump();
  alice_json({"project", "quota", "research", "--model", "H100-80GB", "--guarantee", "4"});

  std::vector<std::string> ids;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--model", "H100-80GB", "--gpus", "2", "--project", "research"},
           {"--kind", "gang", "--model", "H100-80GB", "--gpus", "2", "--nodes", "2"},
           {"--kind", "mig", "--model", "A100-80GB", "--mig-profile", "3g.40gb"},
           {"--kind", "share", "--model", "L40S", "--share", "0.25", "--gpu-memory-mib", "8192"},
           {"--kind", "node", "--model", "L40S"}}) {
    std::vector<std::string> argv = {"alloc", "create"};
    argv.insert(argv.end(), args.begin(), args.end());
    Json a = alice_json(argv);
    EXPECT_EQ(a["state"], "running") << a.dump();
    ids.push_back(a.value("id", ""));
  }
  // Over the quota (2 + 4 of 8 used): it waits, and `why` says for what.
  Json queued = alice_json({"alloc", "create", "--model", "H100-80GB", "--gpus", "4"});
  EXPECT_EQ(queued["state"], "pending") << queued.dump();
  ProcessResult why = Run(alice, {"why", queued.value("id", "")});
  EXPECT_EQ(why.exit_code, 0) << Describe(why);
  EXPECT_NE(why.out.find("quota"), std::string::npos) << why.out;

  // Never fits: refused with the reason, nothing stored.
  ProcessResult never = Run(alice, {"alloc", "create", "--model", "H200-141GB"});
  EXPECT_EQ(never.exit_code, 1) << Describe(never);
  EXPECT_NE(never.err.find("never fit"), std::string::npos) << never.err;
  // Usage errors exit 2 before anything is sent.
  EXPECT_EQ(Run(alice, {"alloc", "create", "--kind", "gang", "--model", "H100-80GB"}).exit_code, 2);
  EXPECT_EQ(Admin({"quota", "set", "acme", "--model", "L4", "--guarantee", "lots"}).exit_code, 2);
  EXPECT_EQ(Run(alice, {"alloc", "create", "--model", "H100-80GB", "--gpus", "9"}).exit_code, 2);

  Json list = alice_json({"alloc", "list", "--all"});
  ASSERT_EQ(list.size(), 6u) << list.dump();
  ProcessResult table = Run(alice, {"alloc", "list"});
  EXPECT_NE(table.out.find("gang"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("3g.40gb"), std::string::npos) << table.out;

  // The fleet as an operator sees it, and as the tenant does.
  ProcessResult nodes = Admin({"node", "list"});
  EXPECT_EQ(nodes.exit_code, 0) << Describe(nodes);
  EXPECT_NE(nodes.out.find("h100-80gb-1"), std::string::npos) << nodes.out;
  ProcessResult capacity = Admin({"capacity"});
  EXPECT_EQ(capacity.exit_code, 0) << Describe(capacity);
  EXPECT_NE(capacity.out.find("A100-80GB"), std::string::npos) << capacity.out;
  EXPECT_NE(capacity.out.find("3g.40gb="), std::string::npos) << capacity.out;
  Json gpus = AdminJson({"gpu", "list", "--node", "a100-80gb-0", "-o", "json"});
  EXPECT_EQ(gpus.size(), 8u);
  Json node = alice_json({"node", "get", "h100-80gb-0"});
  EXPECT_EQ(node["gpus"].size(), 8u);
  ProcessResult cordon = Admin({"node", "cordon", "l40s-1"});
  EXPECT_EQ(cordon.exit_code, 0) << Describe(cordon);
  EXPECT_NE(cordon.out.find("cordoned"), std::string::npos) << cordon.out;
  EXPECT_EQ(Run(alice, {"node", "drain", "l40s-0"}).exit_code, 1);  // 403

  // Release one; the queued request fits in its place (within the quota).
  Json released = alice_json({"alloc", "release", ids[0]});
  EXPECT_EQ(released["state"], "released");
  // Its GPUs are scrubbed first (`atrium dev` runs `sleep 1` for each): wait
  // until none is, so the restart below finds the queued request placed.
  auto scrubbing = [&] {
    int n = 0;
    for (const auto& g : AdminJson({"gpu", "list", "-o", "json"})) n += g["state"] == "scrubbing";
    return n;
  };
  for (int i = 0; i < 300 && scrubbing() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(scrubbing(), 0);

  // Restart on the same data: the same placements and states come back.
  auto placements = [&]() {
    std::map<std::string, std::string> out;
    for (const auto& a : alice_json({"alloc", "list", "--all"})) {
      out[a.value("id", "")] =
          a.value("state", "") + " " + a["placement"].dump() + " " + a["mig_start"].dump();
    }
    return out;
  };
  const auto before = placements();
  EXPECT_EQ(before.size(), 6u);
  ASSERT_EQ(StopServer(), 0) << server_->Output();
  server_args_.clear();  // no --fleet: the stored fleet, cordon included
  ASSERT_NO_FATAL_FAILURE(StartServer());
  // The new port is another server to the credentials file: log in again.
  ProcessResult login = Run(
      {"", home, false},
      {"login", "--server", url_, "--tenant", "acme", "--username", "alice", "--password-stdin"},
      std::string(kPassword) + "\n");
  ASSERT_EQ(login.exit_code, 0) << Describe(login);
  EXPECT_EQ(placements(), before);
  Json cordoned = AdminJson({"node", "get", "l40s-1", "-o", "json"});
  EXPECT_EQ(cordoned["state"], "cordoned");

  // A fleet that cannot hold what is running is refused at start.
  ASSERT_EQ(StopServer(), 0) << server_->Output();
  ProcessResult refused =
      testing::RunProcess({ATRIUM_BINARY, "dev", "--data", data_dir_, "--api-listen", "127.0.0.1:0",
                           "--gateway-listen", "127.0.0.1:0", "--fleet", "1xL40Sx4"},
                          {"HOME=" + root_, "PATH=/usr/bin:/bin"}, "", kServerTimeout);
  EXPECT_EQ(refused.exit_code, 1) << Describe(refused);
  EXPECT_NE(refused.err.find("cannot hold"), std::string::npos) << Describe(refused);
  ProcessResult bad_spec =
      testing::RunProcess({ATRIUM_BINARY, "dev", "--data", data_dir_, "--fleet", "2xB300x8"},
                          {"HOME=" + root_, "PATH=/usr/bin:/bin"}, "", kServerTimeout);
  EXPECT_EQ(bad_spec.exit_code, 2) << Describe(bad_spec);
}

// GPU time through the real binary: allocations held and released are
// billed from placement to release, the meter is killed (-9 of the whole
// server) between rounds, and after the restart every allocation is billed
// exactly once — one closing record each, the amounts what it held. The
// tenant reads it with `usage gpu`, `usage gpu-summary` and `usage summary`;
// another tenant cannot.
TEST_F(CliIntegrationTest, GpuTimeIsBilledOnceAcrossAKill9) {
  ASSERT_EQ(StopServer(), 0) << server_->Output();
  server_args_ = {"--metering-interval-ms", "100"};
  ASSERT_NO_FATAL_FAILURE(StartServer());
  const std::string acme_id = AdminJson({"tenant", "create", "acme", "-o", "json"}).value("id", "");
  AdminJson({"tenant", "create", "globex", "-o", "json"});
  for (std::vector<std::string> quota :
       {std::vector<std::string>{"--model", "H100-80GB", "--kind", "gpu", "--guarantee", "8"},
        {"--model", "L40S", "--kind", "share", "--guarantee", "1"}}) {
    quota.insert(quota.begin(), {"quota", "set", "acme"});
    ASSERT_EQ(Admin(quota).exit_code, 0);
  }
  const std::string home = LoginAsNewTenantAdmin("acme", "alice");
  const std::string bob_home = LoginAsNewTenantAdmin("globex", "bob");
  auto alice = [&](std::vector<std::string> args) {
    args.insert(args.end(), {"-o", "json"});
    ProcessResult r = Run({"", home, false}, args);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    return ParsedJson(r);
  };
  std::vector<std::string> ids;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--model", "H100-80GB", "--gpus", "2"},
           {"--kind", "share", "--model", "L40S", "--share", "0.25", "--gpu-memory-mib", "8192"},
           {"--model", "H100-80GB", "--gpus", "1"}}) {
    std::vector<std::string> argv = {"alloc", "create"};
    argv.insert(argv.end(), args.begin(), args.end());
    Json a = alice(argv);
    ASSERT_EQ(a["state"], "running") << a.dump();
    ids.push_back(a.value("id", ""));
  }
  // Closing records of `want` allocations, waited for (the meter runs on
  // its own timer in the server; nothing tells the test when).
  auto closed = [&](size_t want) {
    Json records;
    EXPECT_TRUE(testing_support::WaitUntil(
        [&] {
          records = alice({"usage", "gpu", "--all"});
          size_t closing = 0;
          for (const auto& r : records) closing += r.value("closes_subject", false) ? 1 : 0;
          return closing >= want;
        },
        kServerTimeout))
        << records.dump();
    return records;
  };
  alice({"alloc", "release", ids[0]});
  alice({"alloc", "release", ids[1]});
  Json before_kill = closed(2);
  // kill -9 between (or during) the meter's rounds, then a restart.
  EXPECT_EQ(server_->Stop(SIGKILL, kServerTimeout), 128 + SIGKILL);
  ASSERT_NO_FATAL_FAILURE(StartServer());
  ProcessResult login = Run(
      {"", home, false},
      {"login", "--server", url_, "--tenant", "acme", "--username", "alice", "--password-stdin"},
      std::string(kPassword) + "\n");
  ASSERT_EQ(login.exit_code, 0) << Describe(login);
  alice({"alloc", "release", ids[2]});
  Json records = closed(3);

  // Each allocation: one closing record, the records tile placement to
  // release, the amount its charge times what it held; no id twice.
  std::set<std::string> record_ids;
  for (const std::string& id : ids) {
    Json a = alice({"alloc", "get", id});
    auto placed = ParseTimestamp(a.value("placed_at", ""), "placed_at");
    auto ended = ParseTimestamp(a.value("ended_at", ""), "ended_at");
    ASSERT_TRUE(placed.has_value() && ended.has_value()) << a.dump();
    int64_t billed = 0;
    int closing = 0;
    for (const auto& r : records) {
      if (r.value("subject_id", "") != id) continue;
      EXPECT_TRUE(record_ids.insert(r.value("id", "")).second) << r.dump();
      billed += r["gpu_milli_ms"].get<int64_t>();
      closing += r.value("closes_subject", false) ? 1 : 0;
    }
    EXPECT_EQ(closing, 1) << id;
    EXPECT_EQ(billed, a["charge_milli"].get<int64_t>() * (*ended - *placed)) << id;
  }
  // What was stored before the kill is still there, unchanged.
  for (const auto& r : before_kill) {
    bool kept = false;
    for (const auto& now : records) kept = kept || now == r;
    EXPECT_TRUE(kept) << r.dump();
  }

  Json by_model = alice({"usage", "gpu-summary", "--group-by", "model"});
  ASSERT_EQ(by_model["items"].size(), 2u) << by_model.dump();
  ProcessResult table = Run({"", home, false}, {"usage", "summary"});
  EXPECT_EQ(table.exit_code, 0) << Describe(table);
  EXPECT_NE(table.out.find("GPU time held"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("H100-80GB"), std::string::npos) << table.out;
  // Another tenant's user: as if acme did not exist.
  ProcessResult other = Run({"", bob_home, false}, {"usage", "gpu", "--tenant", acme_id});
  EXPECT_EQ(other.exit_code, 1) << Describe(other);
  ProcessResult other_summary =
      Run({"", bob_home, false}, {"usage", "gpu-summary", "--tenant", "acme"});
  EXPECT_EQ(other_summary.exit_code, 1) << Describe(other_summary);
}

// The whole path under `atrium dev`: a tenant's job runs in the local
// sandbox on the GPU the scheduler chose, its log is the tenant's only,
// a cancel stops it, and a `kill -9` of the control plane loses no job.
TEST_F(CliIntegrationTest, JobsRunInSandboxesAndSurviveAKill9) {
  const TwoTenantHomes homes = AcmeWithGpusAndGlobex(4);
  const std::string& home = homes.alice;
  const std::string& bob_home = homes.bob;
  auto alice = [&](std::vector<std::string> args) { return UserJson(home, std::move(args)); };
  auto state_of = [&](const std::string& id) { return JobState(home, id); };
  auto wait_for_state = [&](const std::string& id, const std::string& want) {
    WaitForJobState(home, id, want);
  };

  Json hello = alice({"job", "submit", "--name", "hello", "--model", "H100-80GB", "--gpus", "1",
                      "--", "/bin/sh", "-c",
                      "echo CUDA=$CUDA_VISIBLE_DEVICES; ls /dev; ls /work >/dev/null && id -u"});
  const std::string hello_id = hello.value("id", "");
  ASSERT_FALSE(hello_id.empty()) << hello.dump();
  wait_for_state(hello_id, "succeeded");
  ProcessResult log = Run({"", home, false}, {"job", "logs", hello_id});
  ASSERT_EQ(log.exit_code, 0) << Describe(log);
  EXPECT_NE(log.out.find("CUDA=0"), std::string::npos) << log.out;
  EXPECT_NE(log.out.find("nvidia0"), std::string::npos) << log.out;  // its one GPU
  EXPECT_EQ(log.out.find("nvidia1"), std::string::npos) << log.out;  // and no other
  EXPECT_EQ(log.out.find("\n0\n"), std::string::npos) << "ran as root:\n" << log.out;
  // Another tenant neither reads its log nor cancels it.
  EXPECT_EQ(Run({"", bob_home, false}, {"job", "logs", hello_id}).exit_code, 1);
  EXPECT_EQ(Run({"", bob_home, false}, {"job", "cancel", hello_id}).exit_code, 1);
  Json events = alice({"job", "events", hello_id});
  EXPECT_GE(events["items"].size(), 4u) << events.dump();

  Json sleeper = alice({"job", "submit", "--name", "sleeper", "--model", "H100-80GB", "--gpus", "1",
                        "--", "/bin/sleep", "600"});
  const std::string sleeper_id = sleeper.value("id", "");
  wait_for_state(sleeper_id, "running");
  // kill -9 of the control plane: the workload runs on, and is adopted.
  EXPECT_EQ(server_->Stop(SIGKILL, kServerTimeout), 128 + SIGKILL);
  ASSERT_NO_FATAL_FAILURE(StartServer());
  ProcessResult login = Run(
      {"", home, false},
      {"login", "--server", url_, "--tenant", "acme", "--username", "alice", "--password-stdin"},
      std::string(kPassword) + "\n");
  ASSERT_EQ(login.exit_code, 0) << Describe(login);
  EXPECT_EQ(state_of(sleeper_id), "running");
  EXPECT_EQ(alice({"job", "get", sleeper_id}).value("attempt", 0), 1);  // not started again
  alice({"job", "cancel", sleeper_id});
  wait_for_state(sleeper_id, "cancelled");
  EXPECT_EQ(state_of(hello_id), "succeeded");
}

// Working files from an uploaded archive under `atrium dev`: `job submit
// --archive` uploads a tar.gz and the job runs a script from it in its
// sandbox; the archive is the tenant's alone, and hostile tars are refused
// at upload with the entry named.
TEST_F(CliIntegrationTest, AJobRunsAScriptFromItsUploadedArchive) {
  const TwoTenantHomes homes = AcmeWithGpusAndGlobex(1);
  const std::string& home = homes.alice;
  const std::string& bob_home = homes.bob;

  const std::string src = root_ + "/work-src";
  std::filesystem::create_directories(src + "/data");
  std::ofstream(src + "/run.sh") << "cat data/msg.txt\nid -u\n";
  std::ofstream(src + "/data/msg.txt") << "hello from the archive\n";
  const std::string tgz = root_ + "/work.tgz";
  ASSERT_EQ(std::system(("tar -czf " + tgz + " -C " + src + " run.sh data").c_str()), 0);

  ProcessResult submitted = Run(
      {"", home, false}, {"job", "submit", "-o", "json", "--name", "from-archive", "--model",
                          "H100-80GB", "--gpus", "1", "--archive", tgz, "--", "/bin/sh", "run.sh"});
  ASSERT_EQ(submitted.exit_code, 0) << Describe(submitted);
  const std::string id = ParsedJson(submitted).value("id", "");
  ASSERT_FALSE(id.empty()) << submitted.out;
  std::string state;
  EXPECT_TRUE(testing_support::WaitUntil(
      [&] {
        state = ParsedJson(Run({"", home, false}, {"job", "get", "-o", "json", id}))
                    .value("state", std::string());
        return state == "succeeded" || state == "failed";
      },
      kServerTimeout))
      << server_->Output();
  ProcessResult log = Run({"", home, false}, {"job", "logs", id});
  EXPECT_EQ(state, "succeeded") << log.out;
  EXPECT_NE(log.out.find("hello from the archive"), std::string::npos) << log.out;
  EXPECT_EQ(log.out.find("\n0\n"), std::string::npos) << "ran as root:\n" << log.out;

  // The archive is listed for its tenant only.
  Json listed =
      ParsedJson(Run({"", home, false}, {"job", "archives", "list", "-o", "json"}))["items"];
  ASSERT_EQ(listed.size(), 1u) << listed.dump();
  const std::string archive_id = listed[0].value("id", "");
  EXPECT_EQ(listed[0].value("name", ""), "work.tgz");
  EXPECT_EQ(
      ParsedJson(Run({"", bob_home, false}, {"job", "archives", "list", "-o", "json"}))["items"]
          .size(),
      0u);
  EXPECT_EQ(Run({"", bob_home, false}, {"job", "archives", "delete", archive_id}).exit_code, 1);

  // Hostile archives: an absolute name, a link to /etc/shadow.
  const std::string absolute = root_ + "/absolute.tar";
  ASSERT_EQ(std::system(("tar -cPf " + absolute + " /etc/hostname").c_str()), 0);
  ProcessResult refused = Run({"", home, false}, {"job", "upload", absolute});
  EXPECT_EQ(refused.exit_code, 1) << Describe(refused);
  EXPECT_NE(refused.err.find("absolute"), std::string::npos) << refused.err;
  std::filesystem::create_symlink("/etc/shadow", src + "/shadow");
  const std::string linked = root_ + "/linked.tar";
  ASSERT_EQ(std::system(("tar -cf " + linked + " -C " + src + " shadow").c_str()), 0);
  refused = Run({"", home, false}, {"job", "upload", linked});
  EXPECT_EQ(refused.exit_code, 1) << Describe(refused);
  EXPECT_NE(refused.err.find("'shadow'"), std::string::npos) << refused.err;

  EXPECT_EQ(Run({"", home, false}, {"job", "archives", "delete", archive_id}).exit_code, 0);
  EXPECT_EQ(
      ParsedJson(Run({"", home, false}, {"job", "archives", "list", "-o", "json"}))["items"].size(),
      0u);
}

// A job's GPU time under `atrium dev`: recorded once, from its start to its
// end, across a `kill -9` of the control plane while it ran; beside its
// allocation's held time (what is billed), never added to it; readable by
// job id, and not by another tenant.
TEST_F(CliIntegrationTest, AJobsGpuTimeIsRecordedOnceAcrossAKill9BesideTheTimeHeld) {
  ASSERT_EQ(StopServer(), 0) << server_->Output();
  server_args_ = {"--metering-interval-ms", "100"};
  ASSERT_NO_FATAL_FAILURE(StartServer());
  const TwoTenantHomes homes = AcmeWithGpusAndGlobex(4);
  const std::string& home = homes.alice;
  const std::string& bob_home = homes.bob;
  auto alice = [&](std::vector<std::string> args) { return UserJson(home, std::move(args)); };
  auto wait_for_state = [&](const std::string& id, const std::string& want) {
    WaitForJobState(home, id, want);
  };
  Json job = alice({"job", "submit", "--name", "sleeper", "--model", "H100-80GB", "--gpus", "2",
                    "--", "/bin/sleep", "600"});
  const std::string job_id = job.value("id", "");
  ASSERT_FALSE(job_id.empty()) << job.dump();
  wait_for_state(job_id, "running");
  // kill -9 while it runs; the restarted control plane adopts it.
  EXPECT_EQ(server_->Stop(SIGKILL, kServerTimeout), 128 + SIGKILL);
  ASSERT_NO_FATAL_FAILURE(StartServer());
  // The restarted server listens on a new port: both users log in again.
  for (const auto& [user_home, tenant, user] :
       {std::tuple{home, "acme", "alice"}, std::tuple{bob_home, "globex", "bob"}}) {
    ProcessResult login =
        Run({"", user_home, false},
            {"login", "--server", url_, "--tenant", tenant, "--username", user, "--password-stdin"},
            std::string(kPassword) + "\n");
    ASSERT_EQ(login.exit_code, 0) << Describe(login);
  }
  alice({"job", "cancel", job_id});
  wait_for_state(job_id, "cancelled");

  // Both closing records: the job run's and its allocation's.
  Json records;
  EXPECT_TRUE(testing_support::WaitUntil(
      [&] {
        records = alice({"usage", "gpu", "--all"});
        int closing = 0;
        for (const auto& r : records) closing += r.value("closes_subject", false) ? 1 : 0;
        return closing >= 2;
      },
      kServerTimeout))
      << records.dump();
  Json got = alice({"job", "get", job_id});
  EXPECT_EQ(got.value("attempt", 0), 1);
  auto started = ParseTimestamp(got.value("started_at", ""), "started_at");
  auto ended = ParseTimestamp(got.value("ended_at", ""), "ended_at");
  ASSERT_TRUE(started.has_value() && ended.has_value()) << got.dump();
  Json allocation = alice({"alloc", "get", got.value("allocation_id", "")});
  const int64_t charge = allocation["charge_milli"].get<int64_t>();
  EXPECT_EQ(charge, 2000);
  int64_t ran = 0;
  int64_t held = 0;
  int closing = 0;
  std::set<std::string> ids;
  for (const auto& r : records) {
    EXPECT_TRUE(ids.insert(r.value("id", "")).second) << r.dump();
    if (r.value("subject_kind", "") == "allocation") held += r["gpu_milli_ms"].get<int64_t>();
    if (r.value("subject_kind", "") != "job") continue;
    EXPECT_EQ(r.value("subject_id", ""), job_id + ".1") << r.dump();
    ran += r["gpu_milli_ms"].get<int64_t>();
    closing += r.value("closes_subject", false) ? 1 : 0;
  }
  EXPECT_EQ(closing, 1);
  EXPECT_EQ(ran, charge * (*ended - *started));
  EXPECT_GE(held, ran);  // it ran within what its allocation held
  // By job id: the same records.
  Json of_job = alice({"usage", "gpu", "--job", job_id, "--all"});
  int64_t ran_by_id = 0;
  for (const auto& r : of_job) ran_by_id += r["gpu_milli_ms"].get<int64_t>();
  EXPECT_EQ(ran_by_id, ran);

  // The summary keeps the two apart: held (billed) and run by jobs.
  Json summary = alice({"usage", "gpu-summary"});
  ASSERT_EQ(summary["items"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["items"][0]["gpu_milli_ms"], held);
  ASSERT_EQ(summary["run_by_jobs"].size(), 1u) << summary.dump();
  EXPECT_EQ(summary["run_by_jobs"][0]["gpu_milli_ms"], ran);
  ProcessResult table = Run({"", home, false}, {"usage", "summary"});
  EXPECT_EQ(table.exit_code, 0) << Describe(table);
  EXPECT_NE(table.out.find("GPU time held (billed)"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("GPU time run by jobs"), std::string::npos) << table.out;
  // Another tenant's user finds none of it.
  ProcessResult other =
      Run({"", bob_home, false}, {"usage", "gpu", "--tenant", "acme", "--job", job_id});
  EXPECT_EQ(other.exit_code, 1) << Describe(other);
  Json own =
      ParsedJson(Run({"", bob_home, false}, {"usage", "gpu", "--job", job_id, "-o", "json"}));
  EXPECT_TRUE(own["items"].is_array() && own["items"].empty()) << own.dump();
}

// MIG instances and GPU shares as jobs under `atrium dev`: two MIG jobs on
// the simulated A100 each see the parent GPU and only their own capability
// files, and a share sees its GPU with its limits (not enforced, and said so).
TEST_F(CliIntegrationTest, MigAndShareJobsRunConfinedToWhatTheyWereGiven) {
  ASSERT_EQ(StopServer(), 0) << server_->Output();
  data_dir_ = root_ + "/grants-data";
  server_args_ = {"--fleet", "1xA100-80GBx8,1xL40Sx4"};
  ASSERT_NO_FATAL_FAILURE(StartServer());
  AdminJson({"tenant", "create", "acme", "-o", "json"});
  for (std::vector<std::string> quota :
       {std::vector<std::string>{"--model", "A100-80GB", "--kind", "mig", "--guarantee", "2"},
        {"--model", "L40S", "--kind", "share", "--guarantee", "0.5"}}) {
    quota.insert(quota.begin(), {"quota", "set", "acme"});
    ProcessResult set = Admin(quota);
    ASSERT_EQ(set.exit_code, 0) << Describe(set);
  }
  const std::string home = LoginAsNewTenantAdmin("acme", "alice");
  auto alice = [&](std::vector<std::string> args) { return UserJson(home, std::move(args)); };
  auto wait_for_state = [&](const std::string& id, const std::string& want) {
    WaitForJobState(home, id, want);
  };
  const std::string report =
      "echo caps=$(ls /dev/nvidia-caps | tr '\\n' ' '); ls /dev | grep '^nvidia[0-9]'; "
      "echo CUDA=$CUDA_VISIBLE_DEVICES MIG=$ATRIUM_MIG_DEVICE "
      "MPS=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
  std::vector<std::string> mig_ids;
  for (const char* name : {"mig-a", "mig-b"}) {
    Json job = alice({"job", "submit", "--name", name, "--kind", "mig", "--model", "A100-80GB",
                      "--mig-profile", "3g.40gb", "--", "/bin/sh", "-c", report});
    mig_ids.push_back(job.value("id", ""));
    ASSERT_FALSE(mig_ids.back().empty()) << job.dump();
  }
  Json share =
      alice({"job", "submit", "--name", "share", "--kind", "share", "--model", "L40S", "--share",
             "0.25", "--gpu-memory-mib", "4096", "--", "/bin/sh", "-c", report});
  const std::string share_id = share.value("id", "");
  ASSERT_FALSE(share_id.empty()) << share.dump();

  std::vector<std::string> caps_seen;
  for (const auto& id : mig_ids) {
    wait_for_state(id, "succeeded");
    ProcessResult log = Run({"", home, false}, {"job", "logs", id});
    ASSERT_EQ(log.exit_code, 0) << Describe(log);
    // Exactly two capability files (its GPU instance's and compute
    // instance's), one parent GPU, and CUDA pointed at the only MIG device.
    const size_t caps = log.out.find("caps=");
    ASSERT_NE(caps, std::string::npos) << log.out;
    const std::string line = log.out.substr(caps, log.out.find('\n', caps) - caps);
    // "caps=A B": the shell joins the two names with one space.
    EXPECT_EQ(std::count(line.begin(), line.end(), ' '), 1) << line;
    caps_seen.push_back(line);
    EXPECT_NE(log.out.find("CUDA=0 MIG="), std::string::npos) << log.out;
    EXPECT_EQ(std::count(log.out.begin(), log.out.end(), '\n'), 3) << "one GPU:\n" << log.out;
  }
  EXPECT_NE(caps_seen[0], caps_seen[1]) << "two instances, two sets of capabilities";

  wait_for_state(share_id, "succeeded");
  ProcessResult log = Run({"", home, false}, {"job", "logs", share_id});
  ASSERT_EQ(log.exit_code, 0) << Describe(log);
  EXPECT_NE(log.out.find("caps=\n"), std::string::npos) << log.out;
  EXPECT_NE(log.out.find("CUDA=0 MIG= MPS=25"), std::string::npos) << log.out;
}

// A string field, "" when null or absent.
std::string TextOf(const Json& object, const std::string& key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// Managed deployments under `atrium dev` on the local backend: the operator
// creates a shared deployment of two engine-simulator replicas (jobs of the
// platform's serving tenant); they are routed to only once healthy; a
// replica killed by hand is routed around and replaced; scaling down drains
// and scaling up adds, with no failed request; a tenant may not scale the
// shared deployment, see its replicas or set engine arguments on its own.
TEST_F(CliIntegrationTest, ManagedDeploymentRunsReplicasRoutesAroundACrashAndScales) {
  AdminJson({"tenant", "create", "platform-serving", "-o", "json"});
  ASSERT_EQ(Admin({"quota", "set", "platform-serving", "--model", "H100-80GB", "--guarantee", "4"})
                .exit_code,
            0);
  Json created = AdminJson({"deployment", "create", "--model", "sim-managed", "--region", "local",
                            "--template", "engine-sim", "--replicas", "2", "--gpu-model",
                            "H100-80GB", "--gpus", "1", "-o", "json"});
  const std::string dep = created.value("id", "");
  ASSERT_FALSE(dep.empty()) << created.dump();
  EXPECT_EQ(created["endpoints"].size(), 0u) << "routed before any replica is ready";
  auto ready_urls = [&] {
    return testing::ReadyReplicaUrls(AdminJson({"deployment", "replicas", dep, "-o", "json"}));
  };
  auto endpoint_urls = [&] {
    return testing::EndpointUrls(AdminJson({"deployment", "get", dep, "-o", "json"}));
  };
  std::set<std::string> ready;
  ASSERT_TRUE(testing_support::WaitUntil(
      [&] {
        ready = ready_urls();
        return ready.size() == 2 && endpoint_urls() == ready;
      },
      kServerTimeout))
      << "ready: " << ready.size() << "\n"
      << server_->Output();

  // The demo tenant, entitled, calls it through the gateway.
  ASSERT_EQ(Admin({"entitlement", "grant", "demo", "sim-managed"}).exit_code, 0);
  auto gateway = http::Client::Create(gateway_url_, 30'000);
  ASSERT_TRUE(gateway.has_value());
  auto chat = [&] { return DemoChat(**gateway, "sim-managed"); };
  ASSERT_TRUE(testing_support::WaitUntil([&] { return chat() == 200; }, kServerTimeout));

  // Kill one replica's model server by hand while requests flow.
  const std::string victim = *ready.begin();
  const std::string port = victim.substr(victim.rfind(':') + 1);
  ASSERT_EQ(
      testing::RunProcess({"/usr/bin/pkill", "-9", "-f", "engine-sim --listen 127.0.0.1:" + port},
                          {"PATH=/usr/bin:/bin"}, "", kCliTimeout)
          .exit_code,
      0);
  int failed = 0;
  for (int i = 0; i < 30; ++i) failed += chat() == 200 ? 0 : 1;
  EXPECT_EQ(failed, 0) << "requests failed around the crash";
  ASSERT_TRUE(testing_support::WaitUntil(
      [&] {
        ready = ready_urls();
        return ready.size() == 2 && ready.count(victim) == 0 && endpoint_urls() == ready;
      },
      kServerTimeout))
      << "the crashed replica was not replaced\n"
      << server_->Output();
  Json replicas = AdminJson({"deployment", "replicas", dep, "-o", "json"});
  bool crash_recorded = false;
  for (const Json& r : replicas["items"]) {
    crash_recorded =
        crash_recorded || (TextOf(r, "url") == victim && TextOf(r, "state") == "ended" &&
                           TextOf(r, "reason").find("signal 9") != std::string::npos);
  }
  EXPECT_TRUE(crash_recorded) << replicas.dump();

  // Scale down: drained, not cut; then up again.
  AdminJson({"deployment", "scale", dep, "--replicas", "1", "-o", "json"});
  for (int i = 0; i < 30; ++i) failed += chat() == 200 ? 0 : 1;
  ASSERT_TRUE(testing_support::WaitUntil(
      [&] { return ready_urls().size() == 1 && endpoint_urls().size() == 1; }, kServerTimeout));
  AdminJson({"deployment", "scale", dep, "--replicas", "3", "-o", "json"});
  ASSERT_TRUE(testing_support::WaitUntil(
      [&] { return ready_urls().size() == 3 && endpoint_urls().size() == 3; }, kServerTimeout));
  for (int i = 0; i < 10; ++i) failed += chat() == 200 ? 0 : 1;
  EXPECT_EQ(failed, 0);

  // A tenant may not scale the shared deployment, read its replicas, nor
  // give its own dedicated deployment engine arguments.
  const std::string alice = [&] {
    AdminJson({"tenant", "create", "acme", "-o", "json"});
    return LoginAsNewTenantAdmin("acme", "alice");
  }();
  EXPECT_NE(Run({"", alice, false}, {"deployment", "scale", dep, "--replicas", "9"}).exit_code, 0);
  EXPECT_NE(Run({"", alice, false}, {"deployment", "replicas", dep}).exit_code, 0);
  ProcessResult args =
      Run({"", alice, false}, {"deployment", "create", "--model", "mine", "--region", "local",
                               "--template", "engine-sim", "--gpu-model", "H100-80GB", "--gpus",
                               "1", "--extra-arg", "--listen=0.0.0.0:80"});
  EXPECT_NE(args.exit_code, 0) << Describe(args);
  EXPECT_NE(args.err.find("extra_args"), std::string::npos) << Describe(args);

  // Deleting it stops every replica.
  DeleteDeploymentAndItsReplicas(dep);
}

// The README's adapter walk-through with the CLI: the operator gives acme a
// dedicated deployment on one MIG slice that allows adapters; acme
// registers one from a local tar (uploaded, pinned by the file's SHA-256)
// and sees it become ready once the replica loaded it; another tenant
// cannot read it; deleting it works.
TEST_F(CliIntegrationTest, ATenantRegistersAnAdapterFromAFileOnItsMigSliceDeployment) {
  AdminJson({"tenant", "create", "acme", "-o", "json"});
  AdminJson({"tenant", "create", "bolt", "-o", "json"});
  ProcessResult quota =
      Admin({"quota", "set", "acme", "--model", "A100-80GB", "--kind", "mig", "--guarantee", "1"});
  ASSERT_EQ(quota.exit_code, 0) << Describe(quota);
  Json created = AdminJson(
      {"deployment",  "create",    "--model",       "sim-tuned",  "--region",       "local",
       "--tenant",    "acme",      "--template",    "engine-sim", "--kind",         "mig",
       "--gpu-model", "A100-80GB", "--mig-profile", "3g.40gb",    "--max-adapters", "2",
       "-o",          "json"});
  const std::string dep = created.value("id", "");
  ASSERT_FALSE(dep.empty()) << created.dump();
  EXPECT_EQ(created["serving"].value("max_adapters", 0), 2) << created.dump();

  const std::string lora = root_ + "/my-lora";
  std::filesystem::create_directories(lora);
  std::ofstream(lora + "/adapter_config.json") << R"({"r": 8})";
  std::ofstream(lora + "/adapter_model.safetensors") << "weights";
  const std::string tar = root_ + "/my-lora.tar";
  ASSERT_EQ(testing::RunProcess({"/usr/bin/tar", "-C", lora, "-cf", tar, "adapter_config.json",
                                 "adapter_model.safetensors"},
                                {"PATH=/usr/bin:/bin"}, "", kCliTimeout)
                .exit_code,
            0);
  const std::string alice = LoginAsNewTenantAdmin("acme", "alice");
  Json adapter = UserJson(
      alice, {"adapter", "register", "--deployment", dep, "--name", "support", "--file", tar});
  const std::string id = adapter.value("id", "");
  ASSERT_FALSE(id.empty()) << adapter.dump();
  EXPECT_EQ(adapter.value("model", ""), "sim-tuned:support");
  std::ifstream in(tar, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(adapter.value("sha256", ""), crypto::Sha256Hex(bytes));
  std::string status;
  ASSERT_TRUE(testing_support::WaitUntil(
      [&] {
        Json listed = UserJson(alice, {"adapter", "list", "--deployment", dep});
        status = listed["items"].empty() ? "" : TextOf(listed["items"][0], "status");
        return status == "ready" || status == "failed";
      },
      kServerTimeout))
      << server_->Output();
  EXPECT_EQ(status, "ready") << UserJson(alice, {"adapter", "get", id}).dump();

  const std::string bob = LoginAsNewTenantAdmin("bolt", "bob");
  ProcessResult peek = Run({"", bob, false}, {"adapter", "get", id});
  EXPECT_NE(peek.exit_code, 0) << Describe(peek);
  ProcessResult take = Run({"", bob, false}, {"adapter", "delete", id, "--tenant", "acme"});
  EXPECT_NE(take.exit_code, 0) << Describe(take);
  ProcessResult deleted = Run({"", alice, false}, {"adapter", "delete", id});
  EXPECT_EQ(deleted.exit_code, 0) << Describe(deleted);
  EXPECT_TRUE(UserJson(alice, {"adapter", "list"})["items"].empty());
  DeleteDeploymentAndItsReplicas(dep, "acme");
}

// Autoscaling under `atrium dev`: a deployment that may scale to zero
// stops its last replica once idle, and the next request waits in the
// gateway's queue while the controller, told of it by the gateway's load
// report, starts one; the request is then served. Both decisions are in
// the audit trail with the numbers that drove them.
TEST_F(CliIntegrationTest, AnAutoscalingDeploymentScalesToZeroAndBackForTheNextRequest) {
  ASSERT_EQ(StopServer(), 0) << server_->Output();
  // Its replicas' ports apart from the other managed-deployment test's,
  // which ctest may run at the same time.
  server_args_ = {"--autoscale-cooldown-ms", "2000", "--serving-port-min", "21000"};
  ASSERT_NO_FATAL_FAILURE(StartServer());
  AdminJson({"tenant", "create", "platform-serving", "-o", "json"});
  ASSERT_EQ(Admin({"quota", "set", "platform-serving", "--model", "H100-80GB", "--guarantee", "2"})
                .exit_code,
            0);
  Json created = AdminJson({"deployment",  "create",         "--model",    "sim-auto",
                            "--region",    "local",          "--template", "engine-sim",
                            "--autoscale", "--replicas",     "1",          "--min-replicas",
                            "0",           "--max-replicas", "2",          "--gpu-model",
                            "H100-80GB",   "--gpus",         "1",          "-o",
                            "json"});
  const std::string dep = created.value("id", "");
  ASSERT_FALSE(dep.empty()) << created.dump();
  auto wanted = [&] {
    Json d = AdminJson({"deployment", "get", dep, "-o", "json"});
    return d["serving"].value("replicas", int64_t{-1});
  };
  auto endpoints = [&] {
    return AdminJson({"deployment", "get", dep, "-o", "json"})["endpoints"].size();
  };
  ASSERT_TRUE(testing_support::WaitUntil([&] { return endpoints() == 1; }, kServerTimeout))
      << server_->Output();
  // Nobody calls it: down to zero, no endpoint left.
  ASSERT_TRUE(
      testing_support::WaitUntil([&] { return wanted() == 0 && endpoints() == 0; }, kServerTimeout))
      << server_->Output();

  // The next request waits for a replica, then is served.
  ASSERT_EQ(Admin({"entitlement", "grant", "demo", "sim-auto"}).exit_code, 0);
  auto gateway = http::Client::Create(gateway_url_, 120'000);
  ASSERT_TRUE(gateway.has_value());
  // The policy reaches the gateway within its poll; until then the model
  // is unknown to it (404). The first answer that is not 404 is the one.
  int status = 0;
  ASSERT_TRUE(testing_support::WaitUntil(
      [&] {
        status = DemoChat(**gateway, "sim-auto");
        return status != 404;
      },
      kServerTimeout));
  EXPECT_EQ(status, 200) << server_->Output();
  EXPECT_GE(wanted(), 1);

  // A shared deployment's decisions are in the platform's chain.
  Json audit = AdminJson({"audit", "list", "--all", "-o", "json"});  // every record, an array
  std::vector<std::string> details;
  for (const Json& a : audit) {
    if (TextOf(a, "action") == "serving.autoscaled") details.push_back(TextOf(a, "detail"));
  }
  ASSERT_GE(details.size(), 2u) << audit.dump();
  bool to_zero = false;
  bool from_zero = false;
  for (const auto& d : details) {
    to_zero = to_zero || d.find("1 -> 0 replicas") != std::string::npos;
    from_zero = from_zero || (d.find("from zero") != std::string::npos &&
                              d.find("1 queued") != std::string::npos);
  }
  EXPECT_TRUE(to_zero) << audit.dump();
  EXPECT_TRUE(from_zero) << audit.dump();

  DeleteDeploymentAndItsReplicas(dep);
}

// Billing under `atrium dev`, from the command line: the operator makes a
// price book and bills tenants without a plan on it; the demo tenant's
// calls through the gateway are rated within seconds and its live draft
// moves; the books verify; a tenant admin of another tenant sees none of
// it; a period that has not ended cannot be finalised.
TEST_F(CliIntegrationTest, TokenCallsMoveTheDraftAndTheBooksVerify) {
  ASSERT_EQ(StopServer(), 0) << server_->Output();
  server_args_ = {"--billing-rating-lag-ms", "1000"};
  ASSERT_NO_FATAL_FAILURE(StartServer());
  ProcessResult made = Admin({"price-book", "create", "standard", "--currency", "USD", "--entries",
                              R"([{"meter": "tokens.input", "price_minor": "100000"},
                                  {"meter": "tokens.output", "price_minor": "300000"}])"});
  ASSERT_EQ(made.exit_code, 0) << Describe(made);
  EXPECT_NE(made.out.find("tokens.output"), std::string::npos) << made.out;
  ASSERT_EQ(Admin({"billing", "set-default", "standard"}).exit_code, 0);
  // Wrong prices are refused before anything is stored.
  ProcessResult bad = Admin({"price-book", "add-version", "standard", "--entries",
                             R"([{"meter": "tokens.input", "price_minor": "1.0000001"}])"});
  EXPECT_EQ(bad.exit_code, 1) << Describe(bad);
  EXPECT_NE(bad.err.find("six decimals"), std::string::npos) << bad.err;

  auto gateway = http::Client::Create(gateway_url_, 30'000);
  ASSERT_TRUE(gateway.has_value());
  for (int i = 0; i < 3; ++i) ASSERT_EQ(DemoChat(**gateway, "llama-3.1-8b-instruct"), 200);
  Json draft;
  ASSERT_TRUE(testing_support::WaitUntil(
      [&] {
        draft = AdminJson({"billing", "draft", "--tenant", "demo", "-o", "json"});
        return draft.value("total_minor", int64_t{0}) > 0;
      },
      kServerTimeout))
      << draft.dump(2) << "\n"
      << server_->Output();
  EXPECT_EQ(draft["status"], "draft");
  EXPECT_EQ(draft["currency"], "USD");
  const std::string period = draft.value("period", "");
  ProcessResult by_key = Admin({"billing", "draft", "--tenant", "demo", "--by", "key"});
  EXPECT_EQ(by_key.exit_code, 0) << Describe(by_key);
  EXPECT_NE(by_key.out.find("Spend per key"), std::string::npos) << by_key.out;
  EXPECT_NE(by_key.out.find("Output tokens"), std::string::npos) << by_key.out;

  ProcessResult verified = Admin({"billing", "verify", period});
  EXPECT_EQ(verified.exit_code, 0) << Describe(verified);
  EXPECT_NE(verified.out.find("rated exactly once"), std::string::npos) << verified.out;

  // Another tenant's admin: as if demo did not exist; its own draft is empty.
  AdminJson({"tenant", "create", "acme", "-o", "json"});
  const std::string alice = LoginAsNewTenantAdmin("acme", "alice");
  ProcessResult peek = Run({"", alice, false}, {"billing", "draft", "--tenant", "demo"});
  EXPECT_EQ(peek.exit_code, 1) << Describe(peek);
  EXPECT_EQ(UserJson(alice, {"billing", "draft"}).value("total_minor", int64_t{-1}), 0);
  ProcessResult books = Run({"", alice, false}, {"price-book", "list"});
  EXPECT_EQ(books.exit_code, 1) << Describe(books);

  ProcessResult early = Admin({"invoice", "finalize", "--tenant", "demo", "--period", period});
  EXPECT_EQ(early.exit_code, 1) << Describe(early);
  EXPECT_NE(early.err.find("has not ended"), std::string::npos) << early.err;
}

// A hard budget stops spending: 48 streamed calls at once against a budget
// of ten of them are cut off with 429 budget_exceeded, the spend stays
// within the stated bound, and raising the budget lets calls through again.
TEST_F(CliIntegrationTest, HardBudgetStopsConcurrentStreamedCalls) {
  ASSERT_EQ(StopServer(), 0) << server_->Output();
  server_args_ = {"--billing-rating-lag-ms", "1000"};
  ASSERT_NO_FATAL_FAILURE(StartServer());
  // A tenth of a cent per output token, a hundredth per input token: a
  // call of 8 tokens out costs a little under a cent.
  ASSERT_EQ(Admin({"price-book", "create", "standard", "--currency", "USD", "--entries",
                   R"([{"meter": "tokens.input", "price_minor": "10000"},
                       {"meter": "tokens.output", "price_minor": "100000"}])"})
                .exit_code,
            0);
  ASSERT_EQ(Admin({"billing", "set-default", "standard"}).exit_code, 0);
  constexpr int64_t kAmount = 10;  // cents
  Json budget = AdminJson({"budget", "create", "--tenant", "demo", "--scope", "tenant",
                           "--amount-minor", std::to_string(kAmount), "-o", "json"});
  ASSERT_EQ(budget.value("currency", ""), "USD") << budget.dump();
  const std::string budget_id = budget.value("id", "");
  // Budgets are the tenant admins' and the platform's: a bad amount changes
  // nothing.
  ProcessResult bad =
      Admin({"budget", "update", budget_id, "--tenant", "demo", "--thresholds", "80,50"});
  EXPECT_EQ(bad.exit_code, 1) << Describe(bad);
  EXPECT_NE(bad.err.find("ascending"), std::string::npos) << bad.err;

  // A budget takes effect at the gateway's next sync (every 250 ms): wait
  // for billing's first count of it, then a little more.
  ASSERT_TRUE(testing_support::WaitUntil(
      [&] {
        return !AdminJson({"budget", "get", budget_id, "--tenant", "demo", "-o", "json"})
                    .value("counted_at", Json())
                    .is_null();
      },
      kServerTimeout));
  std::this_thread::sleep_for(std::chrono::milliseconds(600));

  std::istringstream in(ReadFile(data_dir_ + "/demo.key"));
  std::string key;
  std::getline(in, key);
  const std::string body = R"({"model":"llama-3.1-8b-instruct","stream":true,"max_tokens":8,)"
                           R"("messages":[{"role":"user","content":"Hello"}]})";
  std::atomic<int> served{0}, refused{0}, other{0};
  std::vector<std::thread> threads;
  threads.reserve(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      auto client = http::Client::Create(gateway_url_, 30'000);
      if (!client.has_value()) return;
      for (int i = 0; i < 6; ++i) {
        auto r = (*client)->Send(
            "POST", "/v1/chat/completions", body,
            {{"authorization", "Bearer " + key}, {"content-type", "application/json"}});
        if (!r.has_value()) {
          ++other;
        } else if (r->status == 200) {
          ++served;
        } else if (r->status == 429 && r->body.find("budget_exceeded") != std::string::npos &&
                   r->body.find("insufficient_quota") != std::string::npos) {
          ++refused;
        } else {
          ++other;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(refused.load(), 0) << served.load() << " served";
  // Each call's worst case is a cent; ten fit, never more.
  EXPECT_GE(served.load(), 1);
  EXPECT_LE(served.load(), static_cast<int>(kAmount)) << refused.load() << " refused";

  // The billing service's count: what was served, within the bound (the
  // amount; input estimates are the only part a call can exceed, and
  // these are exact), and the budget shows as exceeded.
  Json counted;
  ASSERT_TRUE(testing_support::WaitUntil(
      [&] {
        counted = AdminJson({"budget", "get", budget_id, "--tenant", "demo", "-o", "json"});
        return counted.value("spent_minor", int64_t{0}) > 0 &&
               counted.value("spent_minor", int64_t{0}) >=
                   AdminJson({"billing", "draft", "--tenant", "demo", "-o", "json"})
                       .value("usage_minor", int64_t{-1});
      },
      kServerTimeout))
      << counted.dump(2);
  EXPECT_LE(counted.value("spent_minor", int64_t{0}), kAmount) << counted.dump(2);

  // Raised: calls go through again within a sync or two.
  ASSERT_EQ(Admin({"budget", "update", budget_id, "--tenant", "demo", "--amount-minor", "100000"})
                .exit_code,
            0);
  auto gateway = http::Client::Create(gateway_url_, 30'000);
  ASSERT_TRUE(gateway.has_value());
  EXPECT_TRUE(testing_support::WaitUntil(
      [&] { return DemoChat(**gateway, "llama-3.1-8b-instruct") == 200; }, kServerTimeout));
  // Deleted: gone from the list.
  ASSERT_EQ(Admin({"budget", "delete", budget_id, "--tenant", "demo"}).exit_code, 0);
  EXPECT_TRUE(AdminJson({"budget", "list", "--tenant", "demo", "-o", "json"})["items"].empty());

  // Credit: granted by the operator, shown with the balance; the draft
  // shows what it would pay now.
  ProcessResult granted = Admin({"credit", "grant", "--tenant", "demo", "--amount-minor", "5",
                                 "--kind", "prepaid", "--note", "PO 7"});
  ASSERT_EQ(granted.exit_code, 0) << Describe(granted);
  Json credits = AdminJson({"credit", "list", "--tenant", "demo", "-o", "json"});
  EXPECT_EQ(credits["balances"][0].value("balance_minor", int64_t{0}), 5) << credits.dump(2);
  ProcessResult table = Admin({"credit", "list", "--tenant", "demo"});
  EXPECT_NE(table.out.find("Balance: 0.05 USD"), std::string::npos) << table.out;
  Json draft;
  EXPECT_TRUE(testing_support::WaitUntil(
      [&] {
        draft = AdminJson({"billing", "draft", "--tenant", "demo", "-o", "json"});
        return draft.value("credits_minor", int64_t{0}) == -5;
      },
      kServerTimeout))
      << draft.dump(2);
}

}  // namespace
}  // namespace atrium

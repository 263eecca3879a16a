// /api/v1/jobs/archives as tenants use it and as a hostile one tries it:
// an upload answers its id, SHA-256 and size and a job names it; a bad
// media type, an oversize body and every hostile tar are refused with
// words that name the problem and change nothing; another tenant's archive
// is a missing one, for reads, deletes and jobs alike.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "api/api_fixture.h"
#include "crypto/crypto.h"
#include "jobs/archive_test_util.h"

namespace atrium::api {
namespace {

using fixture::Actor;
using fixture::ApiHarness;
using fixture::BodyOf;
using fixture::TenantSeed;
using jobs::testing::File;
using jobs::testing::Hardlink;
using jobs::testing::MakeTar;
using jobs::testing::Member;
using jobs::testing::Symlink;

constexpr char kArchives[] = "/api/v1/jobs/archives";

class JobArchiveApiTest : public fixture::TwoJobTenantsTest {
 protected:
  http::Response Upload(const Actor& who, const std::string& bytes,
                        const std::string& type = "application/x-tar",
                        const std::string& query = "") {
    return h_.Call("POST", std::string(kArchives) + query, who.key, bytes, {.content_type = type});
  }
  // Files kept under the archives' root.
  size_t FilesKept() {
    size_t n = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(h_.archives().root_dir())) {
      if (!e.is_directory()) ++n;
    }
    return n;
  }
  Json JobWith(const std::string& archive, int64_t bytes) {
    Json body = fixture::SmallJobBody("from-archive");
    body.erase("command");
    body["script"] = "sh ./run.sh";
    body["archive"] = archive;
    body["archive_bytes"] = bytes;
    return body;
  }
};

TEST_F(JobArchiveApiTest, UploadThenAJobNamesIt) {
  const std::string tar = MakeTar({File("run.sh", "echo hi\n", 0755)}, /*gzip=*/true);
  http::Response up = Upload(alice_, tar, "application/gzip", "?name=work.tgz");
  ASSERT_EQ(up.status, 201) << up.body;
  Json a = BodyOf(up);
  EXPECT_EQ(a["name"], "work.tgz");
  EXPECT_EQ(a["sha256"], crypto::Sha256Hex(tar));
  EXPECT_EQ(a["size_bytes"], static_cast<int64_t>(tar.size()));
  EXPECT_EQ(a["entries"], 1);
  const std::string id = a["id"];

  http::Response list = h_.Call("GET", kArchives, alice_.key);
  ASSERT_EQ(list.status, 200);
  ASSERT_EQ(BodyOf(list)["items"].size(), 1U);
  EXPECT_EQ(h_.Call("GET", std::string(kArchives) + "/" + id, alice_.key).status, 200);

  http::Response job = h_.CallJson("POST", "/api/v1/jobs", alice_.key,
                                   JobWith(id, static_cast<int64_t>(tar.size())));
  ASSERT_EQ(job.status, 201) << job.body;
  ASSERT_TRUE(h_.jobs().Tick().has_value());
  auto w = h_.backend().Get(BodyOf(job)["id"].get<std::string>() + ".1");
  EXPECT_EQ(w.spec.archive_path, h_.archives().root_dir() + "/" + a_.id + "/" + id + ".tar");
  EXPECT_EQ(w.spec.script, "sh ./run.sh");
}

TEST_F(JobArchiveApiTest, AJobNamingAWrongSizeOrAMissingArchiveIsRefused) {
  const std::string tar = MakeTar({File("run.sh", "echo hi\n")});
  const std::string id = BodyOf(Upload(alice_, tar))["id"];
  const int64_t jobs = Rows("SELECT COUNT(*) FROM jobs");
  http::Response wrong = h_.CallJson("POST", "/api/v1/jobs", alice_.key,
                                     JobWith(id, static_cast<int64_t>(tar.size()) + 1));
  EXPECT_EQ(wrong.status, 400) << wrong.body;
  EXPECT_NE(wrong.body.find("archive_bytes"), std::string::npos) << wrong.body;
  http::Response missing = h_.CallJson("POST", "/api/v1/jobs", alice_.key, JobWith("arc_nope", 10));
  EXPECT_EQ(missing.status, 404) << missing.body;
  // Bob names Alice's archive: it does not exist for him.
  http::Response foreign =
      h_.CallJson("POST", "/api/v1/jobs", bob_.key, JobWith(id, static_cast<int64_t>(tar.size())));
  EXPECT_EQ(foreign.status, 404) << foreign.body;
  EXPECT_NE(foreign.body.find("archive " + id + " not found"), std::string::npos) << foreign.body;
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM jobs"), jobs);
}

TEST_F(JobArchiveApiTest, AnotherTenantsArchiveIsAMissingOne) {
  const std::string id = BodyOf(Upload(alice_, MakeTar({File("f", "x")})))["id"];
  const std::string path = std::string(kArchives) + "/" + id;
  http::Response get = h_.Call("GET", path, bob_.key);
  http::Response none = h_.Call("GET", std::string(kArchives) + "/arc_nope", bob_.key);
  EXPECT_EQ(get.status, 404);
  EXPECT_EQ(BodyOf(get)["error"]["message"], BodyOf(none)["error"]["message"]);
  EXPECT_EQ(h_.Call("DELETE", path, bob_.key).status, 404);
  EXPECT_TRUE(BodyOf(h_.Call("GET", kArchives, bob_.key))["items"].empty());
  EXPECT_EQ(h_.Call("GET", path, alice_.key).status, 200) << "still Alice's";
  EXPECT_EQ(h_.Call("DELETE", path, alice_.key).status, 204);
  EXPECT_EQ(h_.Call("GET", path, alice_.key).status, 404);
  EXPECT_EQ(FilesKept(), 0U);
}

TEST_F(JobArchiveApiTest, HostileUploadsAreRefusedAndChangeNothing) {
  Member device{Member::kCharDevice, "mem", "", "", 0666};
  // 16 MiB of zeros in a few KiB of gzip; the harness lets an archive
  // unpack to 4 MiB.
  Member bomb = File("zeros", "");
  bomb.zero_bytes = int64_t{16} << 20;
  struct Case {
    std::string name;
    std::string body;
    std::string type;
    int status;
    std::string says;
  } cases[] = {
      {"traversal", MakeTar({File("../../etc/cron.d/x", "* * * * * root sh")}), "", 400, "'..'"},
      {"absolute", MakeTar({File("/etc/passwd", "root::0:0::/:/bin/sh")}), "", 400, "absolute"},
      {"symlink escape", MakeTar({Symlink("etc", "/etc"), File("etc/passwd", "x")}), "", 400,
       "symbolic link"},
      {"hardlink to /etc/shadow", MakeTar({Hardlink("shadow", "/etc/shadow")}), "", 400,
       "absolute"},
      {"device node", MakeTar({device}), "", 400, "character device 'mem'"},
      {"bomb", MakeTar({bomb}, /*gzip=*/true), "application/gzip", 400, "unpacks to more than"},
      {"malformed", "definitely not a tar", "", 400, "not a readable tar"},
      {"empty", "", "", 400, "empty"},
      {"json", R"({"archive": "please"})", "application/json", 415, "application/x-tar"},
      {"oversize", std::string((1 << 20) + 1, 'x'), "", 413, "at most 1048576 bytes"},
  };
  const int64_t rows = Rows("SELECT COUNT(*) FROM job_archives");
  for (const Case& c : cases) {
    http::Response r = Upload(alice_, c.body, c.type.empty() ? "application/x-tar" : c.type);
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.body;
    EXPECT_NE(r.body.find(c.says), std::string::npos) << c.name << ": " << r.body;
  }
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM job_archives"), rows);
  EXPECT_EQ(FilesKept(), 0U) << "nothing of a refused upload is left on disk";
}

TEST_F(JobArchiveApiTest, EvictionTakesTheTenantsArchives) {
  ASSERT_EQ(Upload(alice_, MakeTar({File("f", "x")})).status, 201);
  ASSERT_EQ(Upload(bob_, MakeTar({File("f", "x")})).status, 201);
  ASSERT_EQ(FilesKept(), 2U);
  http::Response evicted =
      h_.CallJson("POST", "/api/v1/tenants/" + a_.id + "/evict", h_.root_key(), nullptr);
  ASSERT_EQ(evicted.status, 200) << evicted.body;
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM job_archives WHERE tenant_id = '" + a_.id + "'"), 0);
  EXPECT_FALSE(std::filesystem::exists(h_.archives().root_dir() + "/" + a_.id));
  EXPECT_EQ(FilesKept(), 1U) << "the other tenant's stays";
}

}  // namespace
}  // namespace atrium::api

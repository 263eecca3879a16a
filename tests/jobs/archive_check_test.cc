// The archive check as a hostile tenant meets it: every trick of a tar
// that would write outside the job's directory, plant a device or a setuid
// file, or fill the disk is refused with words naming the entry; what is
// accepted comes out as a plain tar of only the entries the check saw.
#include "jobs/archive_check.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>

#include "archive_test_util.h"

namespace atrium::jobs {
namespace {

using testing::Dir;
using testing::File;
using testing::Hardlink;
using testing::MakeTar;
using testing::Member;
using testing::Symlink;

struct Rewritten {
  Result<ArchiveSummary> summary;
  std::string tar;
};

Rewritten Rewrite(const std::string& upload, ArchiveLimits limits = {}) {
  FILE* f = std::tmpfile();
  Result<ArchiveSummary> summary = RewriteArchive(upload, limits, fileno(f));
  std::string out;
  std::rewind(f);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  std::fclose(f);
  return {std::move(summary), std::move(out)};
}

// The refusal's message; fails the test when the archive was accepted.
std::string Refusal(const std::string& upload, ArchiveLimits limits = {}) {
  Rewritten r = Rewrite(upload, limits);
  if (r.summary.has_value()) {
    ADD_FAILURE() << "accepted an archive that should be refused";
    return "";
  }
  EXPECT_EQ(r.summary.error().code, ErrorCode::kInvalidArgument) << r.summary.error().message;
  return r.summary.error().message;
}

struct Seen {
  mode_t type;
  int perm;
  int64_t uid;
  std::string link;
  std::string data;
};

// Reads a tar back: path → what it holds.
std::map<std::string, Seen> ReadBack(const std::string& tar) {
  std::map<std::string, Seen> out;
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_memory(a, tar.data(), tar.size()), ARCHIVE_OK);
  archive_entry* e = nullptr;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    Seen s{archive_entry_filetype(e), static_cast<int>(archive_entry_mode(e) & 07777),
           archive_entry_uid(e), "", ""};
    if (archive_entry_symlink(e) != nullptr) s.link = archive_entry_symlink(e);
    if (archive_entry_hardlink(e) != nullptr) s.link = archive_entry_hardlink(e);
    char buf[4096];
    for (la_ssize_t n; (n = archive_read_data(a, buf, sizeof buf)) > 0;) {
      s.data.append(buf, static_cast<size_t>(n));
    }
    std::string path = archive_entry_pathname(e);
    if (path.size() > 1 && path.back() == '/') path.pop_back();  // directories
    out[path] = s;
  }
  archive_read_free(a);
  return out;
}

TEST(ArchiveCheck, KeepsFilesDirectoriesAndInsideLinksWithCleanNamesAndModes) {
  const std::string upload = MakeTar(
      {Dir("./src/"), File("./src//run.sh", "echo hi\n", 04755), File("data.txt", "payload", 02640),
       Symlink("src/data", "../data.txt"), Hardlink("copy.txt", "data.txt"), Dir("tmp")},
      /*gzip=*/true);
  Rewritten r = Rewrite(upload);
  ASSERT_TRUE(r.summary.has_value()) << r.summary.error().message;
  EXPECT_EQ(r.summary->entries, 6);
  EXPECT_EQ(r.summary->unpacked_bytes, 8 + 7);
  auto seen = ReadBack(r.tar);
  ASSERT_EQ(seen.size(), 6U);
  EXPECT_EQ(seen["src/run.sh"].perm, 0755) << "setuid is dropped";
  EXPECT_EQ(seen["src/run.sh"].data, "echo hi\n");
  EXPECT_EQ(seen["data.txt"].perm, 0640) << "setgid is dropped";
  EXPECT_EQ(seen["src/data"].type, static_cast<mode_t>(AE_IFLNK));
  EXPECT_EQ(seen["src/data"].link, "../data.txt");
  EXPECT_EQ(seen["copy.txt"].link, "data.txt");
  EXPECT_EQ(seen["src"].type, static_cast<mode_t>(AE_IFDIR));
  for (const auto& [path, s] : seen) EXPECT_EQ(s.uid, 0) << path << " keeps no owner";
}

TEST(ArchiveCheck, MembersAlwaysWritableByTheirOwner) {
  Rewritten r = Rewrite(MakeTar({File("ro.txt", "x", 0400), Dir("locked")}));
  ASSERT_TRUE(r.summary.has_value());
  auto seen = ReadBack(r.tar);
  EXPECT_EQ(seen["ro.txt"].perm, 0600);
  EXPECT_EQ(seen["locked"].perm, 0755);
}

TEST(ArchiveCheck, RefusesTraversal) {
  EXPECT_NE(Refusal(MakeTar({File("../evil", "x")})).find("'..'"), std::string::npos);
  EXPECT_NE(Refusal(MakeTar({File("a/../../evil", "x")})).find("'..'"), std::string::npos);
  EXPECT_NE(Refusal(MakeTar({File("ok", "x"), File("a/b/../../../etc/passwd", "x")}))
                .find("a/b/../../../etc/passwd"),
            std::string::npos);
}

TEST(ArchiveCheck, RefusesAbsoluteNames) {
  EXPECT_NE(Refusal(MakeTar({File("/etc/cron.d/evil", "x")})).find("absolute"), std::string::npos);
  EXPECT_NE(Refusal(MakeTar({Dir("/tmp")})).find("absolute"), std::string::npos);
}

TEST(ArchiveCheck, RefusesSymlinksThatLeave) {
  EXPECT_NE(Refusal(MakeTar({Symlink("shadow", "/etc/shadow")})).find("absolute path"),
            std::string::npos);
  EXPECT_NE(Refusal(MakeTar({Symlink("a/up", "../../etc")})).find("outside the archive"),
            std::string::npos);
  EXPECT_NE(Refusal(MakeTar({Symlink("up", "..")})).find("outside the archive"), std::string::npos);
}

TEST(ArchiveCheck, RefusesSymlinkChainsThatLeave) {
  // Each link alone stays inside when read as text; followed, "up" is the
  // root and "x" its parent.
  const std::string message =
      Refusal(MakeTar({Dir("a"), Dir("a/b"), Dir("a/b/c"), Symlink("a/b/c/up", "../../.."),
                       Symlink("x", "a/b/c/up/..")}));
  EXPECT_NE(message.find("'x'"), std::string::npos) << message;
  // A link through a later link of the archive is followed too.
  EXPECT_NE(
      Refusal(MakeTar({Symlink("first", "later/.."), Symlink("later", "..")})).find("outside"),
      std::string::npos);
  // A loop is refused rather than followed forever.
  EXPECT_NE(Refusal(MakeTar({Symlink("p", "q/x"), Symlink("q", "p/y")})).find("too many links"),
            std::string::npos);
}

TEST(ArchiveCheck, RefusesWritesThroughALinkOfTheArchive) {
  EXPECT_NE(Refusal(MakeTar({Dir("sub"), Symlink("link", "sub"), File("link/file", "x")}))
                .find("beneath the symbolic link 'link'"),
            std::string::npos);
  // The classic: a link to /etc, then a file through it.
  EXPECT_NE(Refusal(MakeTar({Symlink("etc", "/etc"), File("etc/passwd", "x")})).size(), 0U);
  // A link replacing a directory that earlier entries went into.
  EXPECT_NE(
      Refusal(MakeTar({File("d/f", "x"), Symlink("d", "elsewhere")})).find("replace a directory"),
      std::string::npos);
}

TEST(ArchiveCheck, RefusesHardlinksToAnythingButEarlierFiles) {
  EXPECT_NE(Refusal(MakeTar({Hardlink("shadow", "/etc/shadow")})).find("absolute"),
            std::string::npos);
  EXPECT_NE(Refusal(MakeTar({Hardlink("shadow", "../../etc/shadow")})).find("'..'"),
            std::string::npos);
  EXPECT_NE(Refusal(MakeTar({Hardlink("early", "later"), File("later", "x")}))
                .find("not an earlier file"),
            std::string::npos);
  EXPECT_NE(Refusal(MakeTar({Dir("d"), Hardlink("to-dir", "d")})).find("not an earlier file"),
            std::string::npos);
}

TEST(ArchiveCheck, RefusesDevicesFifosAndSockets) {
  Member chr{Member::kCharDevice, "null", "", "", 0666};
  Member blk{Member::kBlockDevice, "sda", "", "", 0660};
  Member fifo{Member::kFifo, "pipe", "", "", 0644};
  EXPECT_NE(Refusal(MakeTar({chr})).find("character device 'null'"), std::string::npos);
  EXPECT_NE(Refusal(MakeTar({blk})).find("block device 'sda'"), std::string::npos);
  EXPECT_NE(Refusal(MakeTar({fifo})).find("FIFO 'pipe'"), std::string::npos);
}

TEST(ArchiveCheck, RefusesTheBombAtItsHeader) {
  // 8 MiB of zeros compress to a few KiB; the limit is 1 MiB.
  Member bomb = File("zeros", "");
  bomb.zero_bytes = int64_t{8} << 20;
  const std::string upload = MakeTar({bomb}, /*gzip=*/true);
  ASSERT_LT(upload.size(), 64U * 1024);
  ArchiveLimits limits;
  limits.max_unpacked_bytes = int64_t{1} << 20;
  EXPECT_NE(Refusal(upload, limits).find("unpacks to more than 1048576 bytes"), std::string::npos);
  // Summed over files, each under the limit alone.
  Member half = File("a", "");
  half.zero_bytes = int64_t{600} << 10;
  Member other = half;
  other.path = "b";
  EXPECT_NE(Refusal(MakeTar({half, other}, true), limits).find("(at 'b')"), std::string::npos);
  // A header that declares 8 GiB with no data behind it: refused before
  // any data is read.
  EXPECT_NE(Refusal(testing::UstarHeaderOnly("huge", (int64_t{1} << 33) - 1), limits)
                .find("unpacks to more than"),
            std::string::npos);
}

TEST(ArchiveCheck, RefusesTooManyEntries) {
  std::vector<Member> many;
  for (int i = 0; i < 6; ++i) many.push_back(File("f" + std::to_string(i), ""));
  ArchiveLimits limits;
  limits.max_entries = 5;
  EXPECT_NE(Refusal(MakeTar(many), limits).find("more than 5 entries"), std::string::npos);
  many.pop_back();
  EXPECT_TRUE(Rewrite(MakeTar(many), limits).summary.has_value());
}

TEST(ArchiveCheck, RefusesWhatIsNotATar) {
  EXPECT_NE(
      Refusal("this is not a tar archive, just some text that goes on").find("not a readable"),
      std::string::npos);
  std::string zip = "PK\x03\x04" + std::string(200, 'z');
  EXPECT_NE(Refusal(zip).find("not a readable"), std::string::npos);
  // A tar cut short in the middle of a file's data.
  std::string whole = MakeTar({File("big", std::string(5000, 'b'))});
  EXPECT_NE(Refusal(whole.substr(0, 1024)).find("not a readable"), std::string::npos);
  // A gzip stream cut short, inside a file's data (which does not compress).
  std::string noise(100000, '\0');
  uint32_t x = 12345;
  for (char& c : noise) {
    x = x * 1103515245 + 12345;
    c = static_cast<char>(x >> 24);
  }
  std::string gz = MakeTar({File("big", noise)}, true);
  EXPECT_FALSE(Rewrite(gz.substr(0, gz.size() / 2)).summary.has_value());
  // An archive of nothing.
  EXPECT_NE(Refusal(MakeTar({})).find("no entries"), std::string::npos);
}

TEST(ArchiveCheck, RefusesDuplicatesAndThePlatformsNames) {
  EXPECT_NE(Refusal(MakeTar({File("a", "1"), File("./a", "2")})).find("appears twice"),
            std::string::npos);
  EXPECT_NE(Refusal(MakeTar({File(".atrium-job.sh", "x")})).find("platform's"), std::string::npos);
  EXPECT_TRUE(Rewrite(MakeTar({File("sub/.atrium-notes", "x")})).summary.has_value());
}

TEST(ArchiveCheck, CanonicalMemberPath) {
  EXPECT_EQ(CanonicalMemberPath("./a//b/./c/").value(), "a/b/c");
  EXPECT_FALSE(CanonicalMemberPath("").has_value());
  EXPECT_FALSE(CanonicalMemberPath("./").has_value());
  EXPECT_FALSE(CanonicalMemberPath("/x").has_value());
  EXPECT_FALSE(CanonicalMemberPath("x/..").has_value());
  EXPECT_FALSE(CanonicalMemberPath(std::string("a\0b", 3)).has_value());
  EXPECT_FALSE(CanonicalMemberPath(std::string(300, 'n')).has_value());
}

}  // namespace
}  // namespace atrium::jobs

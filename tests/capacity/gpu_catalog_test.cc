#include "capacity/gpu_catalog.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>

#include "common/json_reader.h"
#include "support/result_matchers.h"

namespace atrium::capacity {
namespace {

TEST(GpuCatalogTest, EmbeddedJsonIsTheDataFileByteForByte) {
  std::ifstream in(ATRIUM_MIG_PROFILES_JSON, std::ios::binary);
  ASSERT_TRUE(in) << ATRIUM_MIG_PROFILES_JSON;
  std::stringstream file;
  file << in.rdbuf();
  EXPECT_EQ(EmbeddedMigProfilesJson(), file.str());
}

TEST(GpuCatalogTest, EmbeddedJsonBuildsTheCatalog) {
  auto built = BuildGpuCatalog(EmbeddedMigProfilesJson());
  ASSERT_OK(built);
  EXPECT_EQ(built->size(), AllGpuModels().size());
}

struct ModelRow {
  const char* name;
  int64_t memory_gb;
  bool mig;
  int tdp;
  Interconnect interconnect;
};

TEST(GpuCatalogTest, ModelsHaveTheirMemoryPowerAndInterconnect) {
  const ModelRow rows[] = {
      {"A100-40GB", 40, true, 400, Interconnect::kNvlink},
      {"A100-80GB", 80, true, 400, Interconnect::kNvlink},
      {"H100-80GB", 80, true, 700, Interconnect::kNvlink},
      {"H200-141GB", 141, true, 700, Interconnect::kNvlink},
      {"A10", 24, false, 150, Interconnect::kPcie},
      {"L4", 24, false, 72, Interconnect::kPcie},
      {"L40S", 48, false, 350, Interconnect::kPcie},
      {"T4", 16, false, 70, Interconnect::kPcie},
      {"V100-16GB", 16, false, 300, Interconnect::kNvlink},
      {"V100-32GB", 32, false, 300, Interconnect::kNvlink},
  };
  ASSERT_EQ(AllGpuModels().size(), std::size(rows));
  for (size_t i = 0; i < std::size(rows); ++i) {
    const ModelRow& row = rows[i];
    SCOPED_TRACE(row.name);
    const GpuModel& m = AllGpuModels()[i];
    EXPECT_EQ(m.name, row.name);
    EXPECT_EQ(m.memory_mib, row.memory_gb * 1024);
    EXPECT_EQ(m.mig_capable, row.mig);
    EXPECT_EQ(m.tdp_watts, row.tdp);
    EXPECT_EQ(m.interconnect, row.interconnect);
    EXPECT_EQ(m.mig_profiles.empty(), !row.mig);
  }
}

struct ProfileRow {
  std::string name;
  int compute;
  int memory;
  std::vector<int> starts;
  int max_instances;
  bool me;
};

// NVIDIA's tables (MIG User Guide, `nvidia-smi mig -lgipp`), restated here so
// a bad edit of the data file fails a test.
std::vector<ProfileRow> ExpectedProfiles(const std::string& mem1, const std::string& mem2,
                                         const std::string& mem4, const std::string& mem8) {
  return {
      {"1g." + mem1, 1, 1, {0, 1, 2, 3, 4, 5, 6}, 7, false},
      {"1g." + mem1 + "+me", 1, 1, {0, 1, 2, 3, 4, 5, 6}, 1, true},
      {"1g." + mem2, 1, 2, {0, 2, 4, 6}, 4, false},
      {"2g." + mem2, 2, 2, {0, 2, 4}, 3, false},
      {"3g." + mem4, 3, 4, {0, 4}, 2, false},
      {"4g." + mem4, 4, 4, {0}, 1, false},
      {"7g." + mem8, 7, 8, {0}, 1, false},
  };
}

TEST(GpuCatalogTest, MigProfilesMatchNvidiaTables) {
  const std::pair<const char*, std::vector<ProfileRow>> models[] = {
      {"A100-40GB", ExpectedProfiles("5gb", "10gb", "20gb", "40gb")},
      {"A100-80GB", ExpectedProfiles("10gb", "20gb", "40gb", "80gb")},
      {"H100-80GB", ExpectedProfiles("10gb", "20gb", "40gb", "80gb")},
      {"H200-141GB", ExpectedProfiles("18gb", "35gb", "71gb", "141gb")},
  };
  for (const auto& [model_name, rows] : models) {
    const GpuModel* model = FindGpuModel(model_name);
    ASSERT_NE(model, nullptr) << model_name;
    ASSERT_EQ(model->mig_profiles.size(), rows.size()) << model_name;
    for (size_t i = 0; i < rows.size(); ++i) {
      const ProfileRow& row = rows[i];
      const MigProfile& p = model->mig_profiles[i];
      SCOPED_TRACE(std::string(model_name) + " " + row.name);
      EXPECT_EQ(p.name, row.name);
      EXPECT_EQ(p.compute_slices, row.compute);
      EXPECT_EQ(p.memory_slices, row.memory);
      EXPECT_EQ(p.valid_start_slots, row.starts);
      EXPECT_EQ(p.max_instances, row.max_instances);
      EXPECT_EQ(p.media_extensions, row.me);
      EXPECT_EQ(p.base_profile, row.me ? model->mig_profiles[0].name : "");
      EXPECT_GT(p.memory_mib, 0);
      EXPECT_LE(p.memory_mib, model->memory_mib);
    }
  }
}

TEST(GpuCatalogTest, ProfileMemoryComesFromNvmlThenNvidiaSmiThenEstimate) {
  // nvml_memory_size_mb when given.
  EXPECT_EQ(FindGpuModel("A100-40GB")->FindMigProfile("1g.5gb")->memory_mib, 4864);
  EXPECT_EQ(FindGpuModel("A100-80GB")->FindMigProfile("7g.80gb")->memory_mib, 80384);
  // Else the GiB nvidia-smi printed.
  EXPECT_EQ(FindGpuModel("H100-80GB")->FindMigProfile("1g.10gb")->memory_mib, 9984);
  EXPECT_EQ(FindGpuModel("H200-141GB")->FindMigProfile("4g.71gb")->memory_mib, 71168);
  // H200 7g.141gb was never seen: twice the 4-slot profile.
  EXPECT_EQ(FindGpuModel("H200-141GB")->FindMigProfile("7g.141gb")->memory_mib, 2 * 71168);
}

TEST(GpuCatalogTest, FindGpuModelIgnoresCase) {
  const GpuModel* h100 = FindGpuModel("H100-80GB");
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(FindGpuModel("h100-80gb"), h100);
  EXPECT_EQ(FindGpuModel("l40s")->name, "L40S");
  EXPECT_EQ(FindGpuModel("H100"), nullptr);
  EXPECT_EQ(FindGpuModel(""), nullptr);
  EXPECT_NE(KnownGpuModelNames().find("A100-40GB, A100-80GB"), std::string::npos);
}

TEST(GpuCatalogTest, FindMigProfileNamesTheKnownProfiles) {
  const GpuModel& a100 = *FindGpuModel("A100-80GB");
  auto found = FindMigProfile(a100, "3g.40gb");
  ASSERT_OK(found);
  EXPECT_EQ((*found)->compute_slices, 3);

  auto unknown = FindMigProfile(a100, "3g.20gb");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(unknown.error().message.find("known: 1g.10gb, 1g.10gb+me, 1g.20gb"), std::string::npos)
      << unknown.error().message;

  auto no_mig = FindMigProfile(*FindGpuModel("L40S"), "1g.10gb");
  ASSERT_FALSE(no_mig.has_value());
  EXPECT_EQ(no_mig.error().message, "L40S does not support MIG");
}

TEST(GpuCatalogTest, InterconnectNames) {
  EXPECT_EQ(InterconnectName(Interconnect::kNvlink), "nvlink");
  EXPECT_EQ(InterconnectName(Interconnect::kPcie), "pcie");
}

// Each case edits the real file and expects BuildGpuCatalog to refuse it with
// a message containing `expected`.
struct BadCatalogCase {
  const char* name;
  std::function<void(Json&)> edit;
  const char* expected;
};

Json& Profile(Json& doc, const char* model, size_t i) { return doc["gpus"][model]["profiles"][i]; }

TEST(GpuCatalogTest, BuildRejectsBadData) {
  const BadCatalogCase cases[] = {
      {"no gpus", [](Json& d) { d.erase("gpus"); }, "'gpus' must be an object"},
      {"missing MIG model", [](Json& d) { d["gpus"].erase("H200-141GB"); },
       "lack MIG-capable model H200-141GB"},
      {"unknown model", [](Json& d) { d["gpus"]["B200"] = d["gpus"]["H100-80GB"]; },
       "describe B200"},
      {"non-MIG model", [](Json& d) { d["gpus"]["L40S"] = d["gpus"]["H100-80GB"]; },
       "describe L40S"},
      {"memory disagrees", [](Json& d) { d["gpus"]["A100-40GB"]["total_memory_gb"] = 48; },
       "disagrees with the built-in table"},
      {"no profiles", [](Json& d) { d["gpus"]["A100-40GB"]["profiles"] = Json::array(); },
       "'profiles' must be a non-empty array"},
      {"start past the end",
       [](Json& d) { Profile(d, "A100-80GB", 4)["placement"]["valid_start_slots"].push_back(6); },
       "3g.40gb: start slot 6 does not fit 8 memory slots"},
      {"negative start",
       [](Json& d) { Profile(d, "A100-80GB", 0)["placement"]["valid_start_slots"][0] = -1; },
       "start slot -1"},
      {"repeated start",
       [](Json& d) { Profile(d, "A100-80GB", 5)["placement"]["valid_start_slots"].push_back(0); },
       "listed twice"},
      {"eight compute slices", [](Json& d) { Profile(d, "H100-80GB", 6)["compute_slices"] = 8; },
       "'compute_slices' is 8, outside 1..7"},
      {"size disagrees",
       [](Json& d) { Profile(d, "H100-80GB", 3)["placement"]["size_in_memory_slots"] = 4; },
       "differs from memory_slices"},
      {"missing max_instances", [](Json& d) { Profile(d, "H100-80GB", 3).erase("max_instances"); },
       "'max_instances' must be an integer"},
      {"string slices", [](Json& d) { Profile(d, "H100-80GB", 3)["memory_slices"] = "2"; },
       "'memory_slices' must be an integer"},
      {"duplicate profile", [](Json& d) { Profile(d, "H100-80GB", 3)["name"] = "1g.20gb"; },
       "1g.20gb is listed twice"},
      {"+me without base", [](Json& d) { Profile(d, "H100-80GB", 1)["name"] = "1g.11gb+me"; },
       "1g.11gb+me needs a profile 1g.11gb"},
      {"nameless profile", [](Json& d) { Profile(d, "H100-80GB", 1).erase("name"); },
       "a profile has no name"},
      {"negative GiB", [](Json& d) { Profile(d, "H100-80GB", 1)["memory_gib_reported"] = -1; },
       "positive number"},
  };
  for (const BadCatalogCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto doc = ParseJson(EmbeddedMigProfilesJson());
    ASSERT_OK(doc);
    c.edit(*doc);
    auto built = BuildGpuCatalog(doc->dump());
    ASSERT_FALSE(built.has_value());
    EXPECT_EQ(built.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(built.error().message.find(c.expected), std::string::npos) << built.error().message;
  }
  EXPECT_ERROR(BuildGpuCatalog("{"), ErrorCode::kInvalidArgument);
  EXPECT_ERROR(BuildGpuCatalog("[]"), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace atrium::capacity

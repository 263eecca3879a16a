// Tenants' LoRA adapters: the pure rules (serving/adapters.h) and what a
// spec allowing adapters changes in a replica's job (serving_spec.h).
#include "serving/adapters.h"

#include <gtest/gtest.h>

#include "common/json_reader.h"
#include "serving/serving_spec.h"

namespace atrium::serving {
namespace {

AdapterRecord Adapter(const std::string& id, const std::string& status = "ready") {
  AdapterRecord a;
  a.id = id;
  a.status = status;
  return a;
}

TEST(AdapterRulesTest, NamesAreShortLowercaseAndNeverHoldTheSeparator) {
  for (const char* ok : {"a", "support-bot", "v1.2_final", "0day"}) {
    EXPECT_TRUE(ValidateAdapterName(ok).has_value()) << ok;
  }
  for (const char* bad :
       {"", "Upper", "a:b", "../x", "a/b", ".hidden", "-flag", "_x", "sp ace", "\xc3\xa9"}) {
    EXPECT_FALSE(ValidateAdapterName(bad).has_value()) << bad;
  }
  EXPECT_TRUE(ValidateAdapterName(std::string(64, 'a')).has_value());
  EXPECT_FALSE(ValidateAdapterName(std::string(65, 'a')).has_value());
}

TEST(AdapterRulesTest, DigestsAreSixtyFourHexDigitsReadLowercase) {
  const std::string upper(64, 'A');
  auto d = NormalizeSha256(upper);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, std::string(64, 'a'));
  EXPECT_FALSE(NormalizeSha256(std::string(63, 'a')).has_value());
  EXPECT_FALSE(NormalizeSha256(std::string(65, 'a')).has_value());
  EXPECT_FALSE(NormalizeSha256(std::string(63, 'a') + "g").has_value());
}

TEST(AdapterRulesTest, AnArtifactIsATenantsArchiveAndNothingThePlatformWouldFetch) {
  auto id = ArchiveOfArtifact("archive:arc_01abc");
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(*id, "arc_01abc");
  for (const char* bad : {"archive:", "arc_01abc", "https://evil.example/lora.tar",
                          "file:///etc/shadow", "hf://org/repo", "/srv/adapters/x"}) {
    EXPECT_FALSE(ArchiveOfArtifact(bad).has_value()) << bad;
  }
  EXPECT_EQ(AdapterModelName("llama", "support"), "llama:support");
}

TEST(AdapterRulesTest, ListedModelsReadsAnOpenAiModelListAndNothingElse) {
  EXPECT_EQ(
      ListedModels(R"({"object":"list","data":[{"id":"llama"},{"id":"ad_1","parent":"llama"}]})"),
      (std::set<std::string>{"llama", "ad_1"}));
  EXPECT_TRUE(ListedModels("not json").empty());
  EXPECT_TRUE(ListedModels(R"({"data":{"id":"x"}})").empty());
  EXPECT_EQ(ListedModels(R"({"data":[{"id":7},"x",{"id":"ok"}]})"), (std::set<std::string>{"ok"}));
}

TEST(AdapterRulesTest, AReplicaLoadsWhatIsUnpackedAndUnloadsOnlyAdaptersNoLongerRegistered) {
  const std::vector<AdapterRecord> adapters = {Adapter("ad_a"), Adapter("ad_b", "loading"),
                                               Adapter("ad_c", "failed"), Adapter("ad_d")};
  const std::set<std::string> on_disk = {"ad_a", "ad_b", "ad_c"};  // ad_d not yet unpacked
  const std::set<std::string> listed = {"llama", "ad_a", "ad_gone", "other-model"};
  AdapterSync sync = PlanAdapterSync(adapters, on_disk, listed);
  EXPECT_EQ(sync.load, (std::vector<std::string>{"ad_b"}));
  EXPECT_EQ(sync.unload, (std::vector<std::string>{"ad_gone"}));
}

TEST(AdapterRulesTest, AnAdapterIsRoutedOnlyOnceEveryReadyReplicaListsIt) {
  EXPECT_EQ(AdapterStatusAfter(true, "", 2, 2), (AdapterStatus{"ready", ""}));
  EXPECT_EQ(AdapterStatusAfter(true, "", 2, 1).status, "loading");
  EXPECT_EQ(AdapterStatusAfter(true, "", 2, 1).detail, "loaded on 1 of 2 ready replicas");
  // No replica ready: each loads it before it becomes ready.
  EXPECT_EQ(AdapterStatusAfter(true, "", 0, 0).status, "ready");
  EXPECT_EQ(AdapterStatusAfter(false, "", 0, 0).status, "loading");
  EXPECT_EQ(AdapterStatusAfter(true, "bad weights", 2, 2),
            (AdapterStatus{"failed", "bad weights"}));
}

TEST(AdapterSpecTest, ASpecAllowingAdaptersRunsTheTemplatesLoraArgsWithItsFolderReadOnly) {
  auto t = FindTemplate(BuiltinTemplates(), "vllm");
  ASSERT_TRUE(t.has_value());
  auto spec =
      ReadManagedSpec(Json::parse(R"({"template":"vllm","max_adapters":8,)"
                                  R"("resources":{"kind":"gpu","model":"H100-80GB","gpus":1}})"),
                      SpecAuthor::kTenant);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->max_adapters, 8);
  EXPECT_EQ(ManagedSpecJson(*spec)["max_adapters"], 8);
  LaunchValues values{
      20'001, "0.0.0.0", "llama", "", "/var/lib/atrium/adapters/dep_1", "/opt/atrium/adapters"};
  auto job = ReplicaJobSpec(*t, *spec, "r", values);
  ASSERT_TRUE(job.has_value()) << job.error().message;
  EXPECT_EQ(job->args.back(), "--enable-lora");
  EXPECT_NE(
      std::find(job->env.begin(), job->env.end(),
                std::pair<std::string, std::string>{"VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True"}),
      job->env.end());
  EXPECT_EQ(job->platform.read_only_binds,
            (std::vector<std::pair<std::string, std::string>>{
                {"/opt/atrium/adapters", "/var/lib/atrium/adapters/dep_1"}}));
  // On Slurm (no inside path) nothing is bound: the engine reads it in place.
  values.adapter_dir_inside = "";
  job = ReplicaJobSpec(*t, *spec, "r", values);
  ASSERT_TRUE(job.has_value());
  EXPECT_TRUE(job->platform.read_only_binds.empty());
  // Without adapters: none of it.
  spec->max_adapters = 0;
  job = ReplicaJobSpec(*t, *spec, "r", values);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(std::count(job->args.begin(), job->args.end(), "--enable-lora"), 0);
  EXPECT_TRUE(job->env.empty());
}

TEST(AdapterSpecTest, OnlyTemplatesThatLoadAdaptersWhileRunningRunThem) {
  auto tgi = FindTemplate(BuiltinTemplates(), "tgi");
  ASSERT_TRUE(tgi.has_value());
  EXPECT_FALSE(tgi->loads_adapters());
  auto spec =
      ReadManagedSpec(Json::parse(R"({"template":"tgi","max_adapters":1,)"
                                  R"("resources":{"kind":"gpu","model":"H100-80GB","gpus":1}})"),
                      SpecAuthor::kPlatform);
  ASSERT_TRUE(spec.has_value());
  EXPECT_FALSE(ReplicaJobSpec(*tgi, *spec, "r", {1, "h", "m", "", "/a", ""}).has_value());
  // Bounds and types.
  for (const char* bad : {R"(-1)", R"(1025)", R"("8")", R"(true)"}) {
    auto r =
        ReadManagedSpec(Json::parse(std::string(R"({"template":"vllm","max_adapters":)") + bad +
                                    R"(,"resources":{"kind":"gpu","model":"H100-80GB","gpus":1}})"),
                        SpecAuthor::kPlatform);
    EXPECT_FALSE(r.has_value()) << bad;
  }
  // Allowing adapters restarts the engine with other arguments: a new
  // generation; changing how many does not.
  ManagedSpec a = *spec;
  ManagedSpec b = a;
  b.max_adapters = 4;
  EXPECT_TRUE(a.SameRun(b));
  b.max_adapters = 0;
  EXPECT_FALSE(a.SameRun(b));
}

TEST(AdapterSpecTest, ATemplatesAdapterFieldsAreChecked) {
  auto t = FindTemplate(BuiltinTemplates(), "engine-sim");
  ASSERT_TRUE(t.has_value());
  EXPECT_TRUE(ValidateTemplate(*t).has_value());
  ServingTemplate half = *t;
  half.adapter_unload_path.clear();
  EXPECT_FALSE(ValidateTemplate(half).has_value());
  ServingTemplate bad_path = *t;
  bad_path.adapter_load_path = "load lora";
  EXPECT_FALSE(ValidateTemplate(bad_path).has_value());
  ServingTemplate bad_arg = *t;
  bad_arg.adapter_args = {"{lora}"};
  EXPECT_FALSE(ValidateTemplate(bad_arg).has_value());
  ServingTemplate bad_env = *t;
  bad_env.adapter_env = {{"", "x"}};
  EXPECT_FALSE(ValidateTemplate(bad_env).has_value());
}

}  // namespace
}  // namespace atrium::serving

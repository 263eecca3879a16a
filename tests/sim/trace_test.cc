#include "sim/trace.h"

#include <gtest/gtest.h>

#include "support/result_matchers.h"

namespace atrium::sim {
namespace {

constexpr char kPods[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
    "p-2,4000,100,1,1500,,LS\n"
    "p-1,8000,200,2,1000,A|B|,BE\n"
    "p-3,1000,0,0,0,,LS\n"
    "p-4,1000,0,0,700,A,LS\n"
    "p-5,3000,10,1,470,|C,LS\n";

TEST(TraceTest, PodsAreConvertedLikeTheReferenceSimulator) {
  auto pods = ParsePodCsv(kPods);
  ASSERT_OK(pods);
  ASSERT_EQ(pods->size(), 5u);
  EXPECT_EQ((*pods)[0].milli, 1000) << "gpu_milli above 1000 is a whole GPU";
  EXPECT_EQ((*pods)[1].types, "A|B") << "empty parts of gpu_spec are dropped";
  EXPECT_EQ((*pods)[2].num_gpu, 0);
  EXPECT_EQ((*pods)[3].milli, 0) << "milli without GPUs asks for nothing";
  EXPECT_EQ((*pods)[3].types, "");
  EXPECT_EQ((*pods)[4].types, "C");
}

TEST(TraceTest, MasksAdmitOnlyListedModels) {
  auto nodes = ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn-b,1000,1,2,B\nn-a,1000,1,8,A\n");
  auto pods = ParsePodCsv(kPods);
  ASSERT_OK(nodes);
  ASSERT_OK(pods);
  auto trace = MakeTrace(*nodes, *pods);
  ASSERT_OK(trace);
  EXPECT_EQ(trace->nodes[0].name, "n-a") << "nodes are kept in name order";
  EXPECT_EQ(trace->pods[0].name, "p-1");
  const auto any = trace->RequestOf(trace->pods[1]);  // p-2
  EXPECT_EQ(any.model_mask, 0u);
  const auto ab = trace->RequestOf(trace->pods[0]);  // p-1: A|B
  EXPECT_TRUE(ab.AllowsModel(trace->ModelIndex("A")));
  EXPECT_TRUE(ab.AllowsModel(trace->ModelIndex("B")));
  const auto c_only = trace->RequestOf(trace->pods[4]);  // p-5: C, absent
  EXPECT_FALSE(c_only.AllowsModel(trace->ModelIndex("A")));
  EXPECT_FALSE(c_only.AllowsModel(trace->ModelIndex("B")));
  EXPECT_EQ(trace->GpuCapacityMilli(), 10000);
}

TEST(TraceTest, BadFilesAreRejectedWithTheLine) {
  EXPECT_ERROR(ParsePodCsv(""), ErrorCode::kInvalidArgument);
  auto missing = ParsePodCsv("name,cpu_milli\np,1\n");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("memory_mib"), std::string::npos);
  auto bad = ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn,12x,1,1,A\n");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("line 2"), std::string::npos);
  EXPECT_NE(bad.error().message.find("cpu_milli"), std::string::npos);
  EXPECT_ERROR(ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn,-1,1,1,A\n"),
               ErrorCode::kInvalidArgument);
  EXPECT_ERROR(ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,17,A\n"),
               ErrorCode::kInvalidArgument);
  EXPECT_ERROR(ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn,1,1\n"),
               ErrorCode::kInvalidArgument);
  auto dup = ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,1,A\nn,1,1,1,A\n");
  ASSERT_OK(dup);
  EXPECT_ERROR(MakeTrace(*dup, *ParsePodCsv(kPods)), ErrorCode::kInvalidArgument);
  EXPECT_ERROR(LoadTrace("/nonexistent/nodes.csv", "/nonexistent/pods.csv"),
               ErrorCode::kInvalidArgument);
}

TEST(TraceTest, TypicalPodsOfTheDefaultTraceMatchTheReference) {
  // METHOD.md §1.3 and Appendix A: 35 of 91 classes, the first (3152 milli-CPU,
  // 810 milli-GPU) with popularity .13482, CPU-only classes included.
  const std::string dir = std::string(ATRIUM_DATA_DIR) + "/alibaba-gpu-v2023/";
  auto trace = LoadTrace(dir + "openb_node_list_gpu_node.csv", dir + "openb_pod_list_default.csv");
  ASSERT_OK(trace);
  EXPECT_EQ(trace->nodes.size(), 1213u);
  EXPECT_EQ(trace->GpuCapacityMilli(), 6212000);
  const auto typical = trace->TypicalPods();
  ASSERT_EQ(typical.size(), 35u);
  EXPECT_EQ(typical[0].cpu, 3152);
  EXPECT_EQ(typical[0].milli, 810);
  EXPECT_NEAR(typical[0].popularity, 0.13482, 5e-6);
  EXPECT_EQ(typical[5].cpu, 12500);
  EXPECT_EQ(typical[5].milli, 0);
  EXPECT_NEAR(typical[34].popularity, 0.00399, 5e-6);
  double sum = 0;
  for (const auto& t : typical) sum += t.popularity;
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

}  // namespace
}  // namespace atrium::sim

// The backend conformance suite (tests/exec/backend_conformance.h) on the
// Slurm backend: real jobs on the one-host cluster of scripts/slurm-dev.sh,
// confined by Slurm's cgroups (devices) and job_container/tmpfs (/tmp), run
// as the tenant's own user.
#include "exec/backend_conformance.h"
#include "slurm/slurm_harness.h"

namespace atrium::exec::conformance {
namespace {

void SkipOrFailWithoutACluster() {
  if (slurm::testing::SlurmRequired()) {
    FAIL() << "ATRIUM_TEST_REQUIRE_SLURM=1 but ATRIUM_TEST_SLURM_DIR is not set";
  }
  GTEST_SKIP() << "Slurm not configured (ATRIUM_TEST_SLURM_DIR; scripts/slurm-dev.sh)";
}

// Skips (or fails, when required) every test of the suite without a cluster.
std::unique_ptr<BackendHarness> MakeSlurmHarness() {
  if (slurm::testing::SlurmTestDir().empty()) {
    SkipOrFailWithoutACluster();
    return nullptr;
  }
  return std::make_unique<slurm::testing::SlurmHarness>();
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Slurm, BackendConformanceTest,
                         ::testing::Values(BackendUnderTest{"slurm", MakeSlurmHarness}),
                         BackendName);

}  // namespace atrium::exec::conformance

// The backend conformance suite (tests/exec/backend_conformance.h) on the
// local backend: real bubblewrap sandboxes, cgroups and fake GPUs.
#include "exec/backend_conformance.h"
#include "exec_local/local_harness.h"

namespace atrium::exec::conformance {

INSTANTIATE_TEST_SUITE_P(Local, BackendConformanceTest,
                         ::testing::Values(BackendUnderTest{
                             "local",
                             [] { return std::make_unique<exec_local::testing::LocalHarness>(); }}),
                         BackendName);

}  // namespace atrium::exec::conformance

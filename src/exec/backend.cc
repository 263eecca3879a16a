#include "exec/backend.h"

namespace atrium::exec {

std::string_view PhaseName(WorkloadPhase phase) {
  switch (phase) {
    case WorkloadPhase::kStarting:
      return "starting";
    case WorkloadPhase::kRunning:
      return "running";
    case WorkloadPhase::kExited:
      return "exited";
    case WorkloadPhase::kLost:
      return "lost";
  }
  return "lost";
}

}  // namespace atrium::exec

// End markers: how a backend hears, sooner than the job service's next
// look, that a workload may have ended.
//
// Whatever sees a workload end (the local supervisor, after writing its
// exit record; on Slurm the controller's EpilogSlurmctld,
// deploy/slurm/job_ended.sh.in) creates an empty file named after the
// workload id in one folder. EndMarkerWatcher watches that folder (inotify,
// and a scan every scan_ms for writers inotify does not see, such as
// another host over a network file system), removes each marker and hands
// its name to the hint (end_marker_watcher.h).
//
// Several control planes may watch one folder (one Slurm controller, one
// EpilogSlurmctld): a watcher given `claims` takes only the markers of
// workloads it knows, leaves the others to their owner, and removes one
// nobody took after unclaimed_ttl_ms (a job Atrium never started).
//
// A marker is only a hint: the job service asks the backend before it
// believes anything. A marker may be late, come twice or never come (the
// job service's periodic reconcile covers every workload regardless), and
// a name that is not a valid workload id is removed unread.
#pragma once

#include <functional>
#include <string>

#include "common/result.h"

namespace atrium::exec {

// Called with a workload id, on the watcher's thread, holding no lock.
using EndHint = std::function<void(const std::string& workload_id)>;

// Creates the marker of `workload_id` in `dir` (mode 0600). Never follows a
// link; an existing marker is left as it is. Errors: InvalidArgument for an
// invalid id, Unavailable when the file cannot be made.
Status MarkEnded(const std::string& dir, const std::string& workload_id);

}  // namespace atrium::exec

// The local backend's sandbox as data: a LaunchSpec plus what the shell
// found on the host become the bubblewrap command line and the environment
// the workload starts with. Pure (no I/O): the shell probes the host (which
// system paths exist, which are symbolic links, which NVIDIA control devices
// are present) and passes the answers in, so every rule below is a unit
// test over argv (tests/exec/sandbox_test.cc).
//
// What the plan confines (README "Workload sandbox (local backend)"):
//  - new pid, ipc, uts and (unless told not to) network namespaces: the
//    workload sees only its own processes and, on the network, loopback;
//  - a root of read-only host system paths (/usr, /bin, /lib*, a short list
//    from /etc) or the environment template's root filesystem, read-only;
//  - a private /tmp and /dev/shm (tmpfs of a bounded size), a fresh /dev
//    holding only the standard nodes, the GPUs it was granted (as
//    /dev/nvidiaN) and the control devices; for a MIG instance, its parent
//    GPU's device file plus the capability device files of its GPU instance
//    and compute instance (/dev/nvidia-caps/nvidia-capN), and no other
//    instance's;
//  - one writable directory, its own, as the working directory (/work);
//  - `--die-with-parent`: the sandbox ends with its supervisor.
// Running as an unprivileged uid and the cgroup limits are the shell's: the
// plan names the uid it expects and refuses root.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "exec/backend.h"

namespace atrium::exec {

// A system path the sandbox shows read-only. When the host's entry is a
// symbolic link (Debian's merged /usr: /bin -> usr/bin) the sandbox gets the
// same link, pointing into the bound tree.
struct HostPath {
  std::string path;            // absolute, e.g. "/usr", "/etc/ld.so.cache"
  std::string symlink_target;  // "" = bind the path itself
};

// What the shell knows about the host and this workload's place on it.
struct SandboxHost {
  std::string bwrap_path = "/usr/bin/bwrap";
  // Where the GPU device files live: "/dev", or a test's folder of fake
  // character devices (`mknod nvidiaN c 195 N`).
  std::string device_dir = "/dev";
  // NVIDIA control devices present in device_dir ("nvidiactl",
  // "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"): bound when the
  // workload has at least one GPU.
  std::vector<std::string> control_devices;
  // The control devices are bound only where they exist when the sandbox
  // starts (`--dev-bind-try`): for a shell that cannot look at the node
  // (Slurm's control plane plans the sandbox of a job on another host).
  bool control_devices_may_be_absent = false;
  // The workload's own directory on the host: bound writable at
  // kSandboxWorkDir and the working directory. Owned by `uid`, 0700.
  std::string work_dir;
  // The in-sandbox init on the host (atrium-sandbox-init): bound read-only
  // at kSandboxInitPath; it runs the command and reports on `report_fd`
  // whether it exited or was killed by a signal (bubblewrap's own exit
  // status folds a signal into 128+N).
  std::string init_path;
  int report_fd = 3;
  // System paths shown read-only when the spec has no root_fs. /proc, /dev
  // and /tmp are always the sandbox's own and may not be listed.
  std::vector<HostPath> system_paths;
  uint32_t uid = 0;  // must not be 0: the shell runs bwrap as this user
  uint32_t gid = 0;
  bool unshare_network = true;  // false only where the host refuses it
  // MIG: where the capability device files live ("/dev/nvidia-caps"; tests:
  // a folder of fakes) and the driver's table of their minors
  // (ParseMigMinors of /proc/driver/nvidia-caps/mig-minors). Only read for
  // a MIG grant.
  std::string caps_dir = "/dev/nvidia-caps";
  std::map<std::string, int> mig_minors;
  // The size of the private /tmp and of /dev/shm, each (bubblewrap's
  // `--size`): without it a tmpfs may take half the host's RAM, which a
  // memory cgroup bounds only where the host has one. Must be positive.
  int64_t tmpfs_bytes = int64_t{1} << 30;
};

// MIG capability names as the driver's mig-minors table spells them: the
// GPU instance `gi` of GPU `gpu` ("gpu0/gi1/access") and its compute
// instance `ci` ("gpu0/gi1/ci0/access"). `gpu` is the GPU's device minor
// (/dev/nvidiaN).
std::string MigGpuInstanceCap(int gpu, int gi);
std::string MigComputeInstanceCap(int gpu, int gi, int ci);

// The driver's /proc/driver/nvidia-caps/mig-minors: one "<name> <minor>"
// per line ("config 1", "gpu0/gi1/access 12"). InvalidArgument for a line
// that is not a name and a minor 0..1048575.
Result<std::map<std::string, int>> ParseMigMinors(std::string_view text);

// The mig-minors table the driver writes for `gpus` GPUs (GPU instances
// 0..14, compute instances 0..7 each, numbered as the driver numbers
// them: config 1, monitor 2, then gpu0/gi0/access 3, gpu0/gi0/ci0..7 4..11,
// gpu0/gi1/access 12, ...): what the simulated fleet and the tests fake.
std::string MigMinorsTable(int gpus);

inline constexpr char kSandboxWorkDir[] = "/work";
inline constexpr char kSandboxInitPath[] = "/dev/.atrium-init";
// The script of a spec with `script`, inside kSandboxWorkDir.
inline constexpr char kSandboxScriptName[] = ".atrium-job.sh";

// Bounds on what a tenant may pass (InvalidArgument beyond them).
inline constexpr size_t kMaxArgs = 4096;
inline constexpr size_t kMaxArgBytes = size_t{128} * 1024;
inline constexpr size_t kMaxEnvVars = 1024;
inline constexpr size_t kMaxEnvNameBytes = 256;
inline constexpr size_t kMaxEnvValueBytes = size_t{32} * 1024;
inline constexpr size_t kMaxCommandBytes = size_t{1024} * 1024;  // argv + env together
inline constexpr size_t kMaxScriptBytes = size_t{1024} * 1024;
inline constexpr size_t kMaxWorkloadIdBytes = 128;
inline constexpr int kMaxGpuIndex = 1023;
inline constexpr int64_t kMaxMemoryMib = int64_t{1} << 30;  // 1 EiB
inline constexpr int64_t kMaxCpuMilli = int64_t{1} << 30;
inline constexpr int64_t kMaxPids = int64_t{1} << 22;  // the kernel's pid_max limit
inline constexpr int64_t kMaxTimeLimitS = int64_t{100} * 365 * 24 * 3600;

struct SandboxPlan {
  // bubblewrap's full argv (argv[0] = bwrap_path), ending in the init and
  // the workload's command.
  std::vector<std::string> argv;
  // The environment bubblewrap is started with and passes on: kept out of
  // argv so that other users of the host cannot read it in /proc/PID/cmdline.
  std::vector<std::pair<std::string, std::string>> env;
  // The device files bound, as host paths (for the shell's cgroup
  // devices allow-list and for the status's detail).
  std::vector<std::string> device_paths;
};

// InvalidArgument naming the field for a spec or host it cannot confine:
// a workload id that is not [A-Za-z0-9_.-] (or starts with '.'), an empty
// command, arguments or environment with NUL bytes or beyond the bounds
// above, an environment name that is not [A-Za-z_][A-Za-z0-9_]* or that
// Atrium sets itself (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES,
// CUDA_MPS_*, ATRIUM_*), a GPU index out of range or granted twice, grants
// that mix kinds (whole GPUs, one MIG instance, one share), a MIG grant
// without its GPU and compute instance ids or whose capability files the
// host's mig-minors table does not list, a share outside 1..999 milli, a
// root_fs or host path that is not absolute or has a ".." component, a
// control device with a '/', uid or gid 0, a tmpfs size that is not
// positive.
//
// What the workload is told about its GPUs:
//  - whole GPUs: CUDA_VISIBLE_DEVICES = 0..n-1 (only the granted device
//    files exist, so CUDA enumerates just those), NVIDIA_VISIBLE_DEVICES =
//    the node's indices;
//  - a MIG instance: both name the MIG device as CUDA accepts it: its UUID
//    ("MIG-<uuid>", R470+ drivers) when known, else
//    "MIG-<GPU uuid>/<gi>/<ci>" (R450/R460 form) when the parent's UUID is
//    known, else CUDA_VISIBLE_DEVICES=0 (the only MIG device whose
//    capabilities the sandbox holds) and NVIDIA_VISIBLE_DEVICES = the
//    parent's index; ATRIUM_MIG_DEVICE = "<gpu>/<gi>/<ci>";
//  - a share: the GPU as for a whole one, ATRIUM_GPU_SHARE_MILLI, and the
//    MPS client limits CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (ceil(milli/10))
//    and, with a memory cap, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=<cap>MB"):
//    they bind only where an MPS server serves the workload.
Result<SandboxPlan> PlanSandbox(const LaunchSpec& spec, const SandboxHost& host);

// Where the archive of a spec with `archive_path` is shown while it is
// unpacked: read-only, in the unpacking sandbox's private /tmp.
inline constexpr char kSandboxArchivePath[] = "/tmp/.atrium-archive";

// The sandbox that unpacks the spec's archive into the workload's directory
// before it starts: the same namespaces, uid and directory as the
// workload's, no GPU, the host's system paths (whose tar reads tar and
// gzip) whatever the template, the archive (`archive_on_host`, a copy the
// workload's uid may read) read-only at kSandboxArchivePath, and tar told
// to keep no owner or mode bits from the archive. GNU tar refuses members
// that would land outside /work ("..", absolute names) and, being in the
// sandbox, could not write outside it anyway.
Result<SandboxPlan> PlanArchiveUnpacking(const LaunchSpec& spec, const SandboxHost& host,
                                         const std::string& archive_on_host);

// The checks PlanSandbox makes on the spec alone, for callers that refuse
// early (the same errors).
Status ValidateLaunchSpec(const LaunchSpec& spec);

// True for ids safe as one path component: 1..kMaxWorkloadIdBytes of
// [A-Za-z0-9_.-], not starting with '.'.
bool IsValidWorkloadId(std::string_view id);

}  // namespace atrium::exec

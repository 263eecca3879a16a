#include "exec/end_markers.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "exec/sandbox.h"

namespace atrium::exec {

Status MarkEnded(const std::string& dir, const std::string& workload_id) {
  if (!IsValidWorkloadId(workload_id)) {
    return Error::InvalidArgument("not a workload id: '" + workload_id + "'");
  }
  const std::string path = dir + "/" + workload_id;
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) {
    return Error::Unavailable("cannot mark " + workload_id + " ended in " + dir + ": " +
                              std::strerror(errno));
  }
  ::close(fd);
  return OkStatus();
}

}  // namespace atrium::exec

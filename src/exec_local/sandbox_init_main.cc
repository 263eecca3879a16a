// atrium-sandbox-init: the first process of a workload inside its sandbox.
//
//   atrium-sandbox-init --report-fd N -- COMMAND [ARGS...]
//
// Runs COMMAND (looked up in PATH) with every signal at its default and
// unblocked, waits for it, and writes "exit <code>" or "signal <number>" to
// fd N before exiting the same way. Bubblewrap folds a signal into exit
// status 128+N, so without this report the supervisor could not tell
// `exit 143` from SIGTERM. It ignores SIGTERM itself, so Stop's SIGTERM
// reaches the command and the report survives; SIGKILL ends it too (then
// the supervisor reads bubblewrap's 137 as SIGKILL).
//
// Linked statically: it runs inside environment templates whose root
// filesystem has no libraries of the host's.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

int main(int argc, char** argv) {
  if (argc < 5 || std::strcmp(argv[1], "--report-fd") != 0 || std::strcmp(argv[3], "--") != 0) {
    std::fprintf(stderr, "usage: atrium-sandbox-init --report-fd N -- COMMAND [ARGS...]\n");
    return 127;
  }
  const int report_fd = std::atoi(argv[2]);
  char** command = argv + 4;

  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) ::signal(sig, SIG_IGN);
  const pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "atrium: cannot start the workload: %s\n", std::strerror(errno));
    return 127;
  }
  if (child == 0) {
    ::close(report_fd);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
    }
    ::execvp(command[0], command);
    std::fprintf(stderr, "atrium: cannot run %s: %s\n", command[0], std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  char line[32];
  int code = 0;
  if (WIFSIGNALED(status)) {
    std::snprintf(line, sizeof line, "signal %d\n", WTERMSIG(status));
    code = 128 + WTERMSIG(status);
  } else {
    std::snprintf(line, sizeof line, "exit %d\n", WEXITSTATUS(status));
    code = WEXITSTATUS(status);
  }
  (void)!::write(report_fd, line, std::strlen(line));
  ::close(report_fd);
  return code;
}

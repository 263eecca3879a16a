#include "cli/terminal.h"

#include <termios.h>
#include <unistd.h>

#include <iostream>
#include <iterator>

namespace atrium::cli {

bool IsInteractive() { return ::isatty(STDIN_FILENO) == 1; }

Result<std::string> ReadLine(const std::string& prompt) {
  std::cerr << prompt << std::flush;
  std::string line;
  if (!std::getline(std::cin, line)) return Error::FailedPrecondition("no answer (end of input)");
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

Result<std::string> ReadSecret(const std::string& prompt) {
  termios saved{};
  bool restore = ::tcgetattr(STDIN_FILENO, &saved) == 0;
  if (restore) {
    termios hidden = saved;
    hidden.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    hidden.c_lflag |= ECHONL;
    ::tcsetattr(STDIN_FILENO, TCSANOW, &hidden);
  }
  auto line = ReadLine(prompt);
  if (restore) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  return line;
}

Result<std::string> ReadStdinSecret() {
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.empty()) return Error::InvalidArgument("no password on stdin");
  return text;
}

}  // namespace atrium::cli

#include "threads/thread_name.h"

#include <pthread.h>

namespace atrium {

void NameThisThread(std::string_view name) {
  char buffer[16];  // the kernel's limit, the terminating NUL included
  const size_t n = name.size() < sizeof buffer ? name.size() : sizeof buffer - 1;
  name.copy(buffer, n);
  buffer[n] = '\0';
  pthread_setname_np(pthread_self(), buffer);  // fails only for too long a name
}

std::string ThisThreadName() {
  char buffer[16] = {};
  if (pthread_getname_np(pthread_self(), buffer, sizeof buffer) != 0) return "";
  return buffer;
}

}  // namespace atrium

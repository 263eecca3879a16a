#include "http/router.h"

namespace atrium::http {

std::vector<std::string_view> PathSegments(std::string_view path) {
  if (!path.empty() && path.front() == '/') path.remove_prefix(1);
  return SplitString(path, '/');
}

}  // namespace atrium::http

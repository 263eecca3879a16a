// Matches (method, path) against route patterns such as
// "/api/v1/tenants/{tenant_id}/users/{user_id}". Pure: no I/O. Each route
// carries a payload T (the API layer stores its handler and permission
// there), so the route table is data that tests can enumerate.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/strings.h"

namespace atrium::http {

// Splits a pattern or a path into segments; "/a/b/" and "/a/b" differ.
std::vector<std::string_view> PathSegments(std::string_view path);

template <typename T>
class Router {
 public:
  struct Route {
    std::string method;
    std::string pattern;
    T payload;
  };
  struct Match {
    const Route* route = nullptr;     // null: no route
    bool method_not_allowed = false;  // path matched, method did not
    std::map<std::string, std::string> params;
  };

  void Add(std::string method, std::string pattern, T payload) {
    routes_.push_back(Route{std::move(method), std::move(pattern), std::move(payload)});
  }

  const std::vector<Route>& routes() const { return routes_; }

  Match Find(std::string_view method, std::string_view path) const {
    Match result;
    auto path_segments = PathSegments(path);
    for (const auto& route : routes_) {
      std::map<std::string, std::string> params;
      if (!MatchPattern(route.pattern, path_segments, params)) continue;
      if (route.method != method) {
        result.method_not_allowed = true;
        continue;
      }
      result.route = &route;
      result.params = std::move(params);
      result.method_not_allowed = false;
      return result;
    }
    return result;
  }

 private:
  static bool MatchPattern(std::string_view pattern,
                           const std::vector<std::string_view>& path_segments,
                           std::map<std::string, std::string>& params) {
    auto pattern_segments = PathSegments(pattern);
    if (pattern_segments.size() != path_segments.size()) return false;
    for (size_t i = 0; i < pattern_segments.size(); ++i) {
      std::string_view p = pattern_segments[i];
      if (p.size() >= 2 && p.front() == '{' && p.back() == '}') {
        if (path_segments[i].empty()) return false;
        params[std::string(p.substr(1, p.size() - 2))] = std::string(path_segments[i]);
      } else if (p != path_segments[i]) {
        return false;
      }
    }
    return true;
  }

  std::vector<Route> routes_;
};

}  // namespace atrium::http

// What the integration tests (local backend and Slurm) read of a managed
// deployment through the CLI's JSON, and one chat through the gateway.
#pragma once

#include <set>
#include <string>

#include "common/json_reader.h"
#include "http/client.h"

namespace atrium::testing {

// The URLs of the replicas `atrium deployment replicas ID -o json` lists as ready.
inline std::set<std::string> ReadyReplicaUrls(const Json& replicas) {
  std::set<std::string> urls;
  if (!replicas.contains("items")) return urls;
  for (const Json& r : replicas["items"]) {
    if (r.value("state", "") == "ready") urls.insert(r.value("url", ""));
  }
  return urls;
}

// The endpoint URLs of `atrium deployment get ID -o json`.
inline std::set<std::string> EndpointUrls(const Json& deployment) {
  std::set<std::string> urls;
  if (!deployment.contains("endpoints") || !deployment["endpoints"].is_array()) return urls;
  for (const Json& e : deployment["endpoints"]) urls.insert(e.value("url", ""));
  return urls;
}

// One chat completion of `model` with API key `key` through the gateway:
// its status, 0 when no answer came.
inline int ChatStatus(http::Client& gateway, const std::string& key, const std::string& model) {
  const std::string body = R"({"model":")" + model +
                           R"(","messages":[{"role":"user","content":"Hello"}],"max_tokens":8})";
  auto r = gateway.Send("POST", "/v1/chat/completions", body,
                        {{"authorization", "Bearer " + key}, {"content-type", "application/json"}});
  return r.has_value() ? r->status : 0;
}

}  // namespace atrium::testing

// What `atrium dev` adds so that a newcomer can call a model within a minute
// of starting: engine simulators in this process (named simulators
// everywhere), registered as one shared deployment with two endpoints, and a
// tenant "demo" entitled to it whose tenant-admin service account's API key
// is written to DATA/demo.key (mode 0600). Kept across restarts: the
// deployment's endpoints are updated to the simulators' new ports, an
// existing demo tenant, account and still-valid key are reused.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "engine_sim/server.h"
#include "runtime/platform.h"

namespace atrium {

inline constexpr const char* kDevModel = "llama-3.1-8b-instruct";
inline constexpr const char* kDevDeploymentId = "dep_dev-llama-3-1-8b";

class DevModels {
 public:
  // `platform` runs both roles.
  static Result<std::unique_ptr<DevModels>> Start(Platform& platform,
                                                  const std::filesystem::path& data_dir);
  ~DevModels();  // stops the simulators

  const std::string& demo_key_path() const { return demo_key_path_; }
  const std::vector<std::string>& endpoint_urls() const { return urls_; }

 private:
  std::vector<std::unique_ptr<engine_sim::Server>> sims_;
  std::vector<std::string> urls_;
  std::string demo_key_path_;
};

}  // namespace atrium

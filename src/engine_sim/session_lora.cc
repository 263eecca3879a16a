// Session: vLLM's run-time LoRA API (ServerOptions::enable_lora). An
// adapter is a folder holding adapter_config.json; once loaded, its name is
// served like a model (the simulated weights are the base model's).
#include <algorithm>
#include <fstream>

#include "common/json_reader.h"
#include "engine_sim/session.h"

namespace atrium::engine_sim {
namespace {

constexpr size_t kMaxAdapterConfigBytes = 1 << 20;

// The lora_name (and, when `with_path`, lora_path) of a request body.
Result<std::pair<std::string, std::string>> ReadLoraRequest(const std::string& body,
                                                            bool with_path) {
  ATRIUM_ASSIGN_OR_RETURN(Json json, ParseJson(body));
  if (!json.is_object()) return Error::InvalidArgument("the body must be a JSON object");
  auto name = json.find("lora_name");
  if (name == json.end() || !name->is_string() || name->get_ref<const std::string&>().empty() ||
      name->get_ref<const std::string&>().size() > 256) {
    return Error::InvalidArgument("'lora_name' must be a non-empty string");
  }
  std::string path;
  if (with_path) {
    auto p = json.find("lora_path");
    if (p == json.end() || !p->is_string() || p->get_ref<const std::string&>().empty() ||
        p->get_ref<const std::string&>().size() > 4096) {
      return Error::InvalidArgument("'lora_path' must be a non-empty string");
    }
    path = p->get<std::string>();
  }
  return std::pair{name->get<std::string>(), path};
}

// What vLLM checks first: the folder's adapter_config.json is a JSON object.
Status CheckAdapterFolder(const std::string& folder) {
  std::ifstream in(folder + "/adapter_config.json", std::ios::binary);
  if (!in) {
    return Error::InvalidArgument("No adapter found for " + folder +
                                  ": adapter_config.json is missing");
  }
  std::string text(kMaxAdapterConfigBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  auto config = ParseJson(text);
  if (text.size() > kMaxAdapterConfigBytes || !config.has_value() || !config->is_object()) {
    return Error::InvalidArgument(folder + "/adapter_config.json is not a JSON object");
  }
  return OkStatus();
}

}  // namespace

void Session::LoadAdapter(const std::string& body) {
  auto request = ReadLoraRequest(body, /*with_path=*/true);
  if (!request.has_value()) return RespondError(request.error());
  const auto& [name, folder] = *request;
  if (std::find(core_->models.begin(), core_->models.end(), name) != core_->models.end()) {
    return RespondError(400, "The lora adapter '" + name + "' is the name of a served model.",
                        "invalid_request_error", "lora_name", "");
  }
  if (Status ok = CheckAdapterFolder(folder); !ok.has_value()) {
    return RespondError(400, ok.error().message, "invalid_request_error", "lora_path", "");
  }
  {
    std::lock_guard<std::mutex> lock(core_->adapters_mu);
    if (core_->adapters.count(name) != 0) {
      return RespondError(400, "The lora adapter '" + name + "' has already been loaded.",
                          "invalid_request_error", "lora_name", "");
    }
    if (core_->adapters.size() >= ServerOptions::kMaxAdapters) {
      return RespondError(400, "No more LoRA adapters fit: unload one first.",
                          "invalid_request_error", "lora_name", "");
    }
    core_->adapters[name] = folder;
  }
  Respond(200, "text/plain", "Success: LoRA adapter '" + name + "' added successfully.");
}

void Session::UnloadAdapter(const std::string& body) {
  auto request = ReadLoraRequest(body, /*with_path=*/false);
  if (!request.has_value()) return RespondError(request.error());
  const std::string& name = request->first;
  {
    std::lock_guard<std::mutex> lock(core_->adapters_mu);
    if (core_->adapters.erase(name) == 0) {
      return RespondError(404, "The lora adapter '" + name + "' cannot be found.",
                          "invalid_request_error", "lora_name", "");
    }
  }
  Respond(200, "text/plain", "Success: LoRA adapter '" + name + "' removed successfully.");
}

}  // namespace atrium::engine_sim

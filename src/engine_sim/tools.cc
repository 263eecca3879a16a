#include "engine_sim/tools.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "engine_sim/engine.h"

namespace atrium::engine_sim {
namespace {

constexpr size_t kBytesPerToken = 4;

struct Tool {
  std::string name;
  const Json* parameters = nullptr;  // the JSON schema; null: none
};

Result<std::vector<Tool>> ReadTools(const Json& body, bool responses) {
  std::vector<Tool> tools;
  auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return tools;
  if (!it->is_array()) return Error::InvalidArgument("'tools' must be an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& tool = (*it)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object()) return Error::InvalidArgument("'" + where + "' must be an object");
    auto type = tool.find("type");
    if (type == tool.end() || !type->is_string()) {
      return Error::InvalidArgument("'" + where + ".type' must be a string");
    }
    if (*type != "function") continue;  // built-in tools: never called here
    const Json* function = &tool;
    if (!responses) {
      auto f = tool.find("function");
      if (f == tool.end() || !f->is_object()) {
        return Error::InvalidArgument("'" + where + ".function' must be an object");
      }
      function = &*f;
    }
    auto name = function->find("name");
    if (name == function->end() || !name->is_string() ||
        name->get_ref<const std::string&>().empty()) {
      return Error::InvalidArgument("'" + where + (responses ? "" : ".function") +
                                    ".name' must be a non-empty string");
    }
    Tool t{name->get<std::string>(), nullptr};
    if (auto p = function->find("parameters"); p != function->end() && p->is_object()) {
      t.parameters = &*p;
    }
    tools.push_back(std::move(t));
  }
  return tools;
}

// A JSON value for a schema: see tools.h.
Json ValueFor(const Json& schema, uint64_t text_hash, int& word) {
  if (!schema.is_object()) return nullptr;
  if (auto e = schema.find("enum"); e != schema.end() && e->is_array() && !e->empty()) {
    return e->front();
  }
  std::string type;
  if (auto t = schema.find("type"); t != schema.end()) {
    if (t->is_string()) type = t->get<std::string>();
    if (t->is_array() && !t->empty() && t->front().is_string())
      type = t->front().get<std::string>();
  }
  if (type == "integer" || type == "number") return 7;
  if (type == "boolean") return true;
  if (type == "array") return Json::array();
  if (type == "object") return Json::object();
  if (type == "null") return nullptr;
  std::string text(TokenText(text_hash, word++));
  text.erase(0, text.find_first_not_of(' '));
  return text;
}

ToolCall CallOf(const Tool& tool, uint64_t text_hash) {
  ToolCall call;
  char id[24];
  std::snprintf(id, sizeof id, "call_%016llx", static_cast<unsigned long long>(text_hash));
  call.call_id = id;
  call.name = tool.name;
  Json arguments = Json::object();
  int word = 0;
  if (tool.parameters != nullptr) {
    if (auto props = tool.parameters->find("properties");
        props != tool.parameters->end() && props->is_object()) {
      for (const auto& [name, schema] : props->items()) {
        arguments[name] = ValueFor(schema, text_hash, word);
      }
    }
  }
  call.arguments = arguments.dump();
  return call;
}

}  // namespace

Result<std::optional<ToolCall>> DecideToolCall(const Json& body, bool responses,
                                               std::string_view last_user_text,
                                               uint64_t text_hash) {
  ATRIUM_ASSIGN_OR_RETURN(std::vector<Tool> tools, ReadTools(body, responses));
  std::string choice = tools.empty() ? "none" : "auto";
  std::string named;
  if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
    if (c->is_string()) {
      choice = c->get<std::string>();
      if (choice != "none" && choice != "auto" && choice != "required") {
        return Error::InvalidArgument("'tool_choice' must be none, auto, required or a function");
      }
    } else if (c->is_object()) {
      const Json* function = &*c;
      if (!responses) {
        auto f = c->find("function");
        if (f == c->end() || !f->is_object()) {
          return Error::InvalidArgument("'tool_choice.function' must be an object");
        }
        function = &*f;
      }
      auto name = function->find("name");
      if (name == function->end() || !name->is_string()) {
        return Error::InvalidArgument("'tool_choice' must name a function");
      }
      choice = "named";
      named = name->get<std::string>();
    } else {
      return Error::InvalidArgument("'tool_choice' must be a string or an object");
    }
  }
  if ((choice == "required" || choice == "named") && tools.empty()) {
    return Error::InvalidArgument("when 'tool_choice' is " + choice +
                                  ", 'tools' must hold a function");
  }
  if (choice == "none" || tools.empty()) return std::optional<ToolCall>();
  if (choice == "named") {
    for (const Tool& t : tools) {
      if (t.name == named) return std::optional<ToolCall>(CallOf(t, text_hash));
    }
    return Error::InvalidArgument("'tool_choice' names '" + named + "', which is not in 'tools'");
  }
  for (const Tool& t : tools) {
    if (last_user_text.find(t.name) != std::string_view::npos) {
      return std::optional<ToolCall>(CallOf(t, text_hash));
    }
  }
  if (choice == "required") return std::optional<ToolCall>(CallOf(tools.front(), text_hash));
  return std::optional<ToolCall>();
}

int ToolCallTokens(const ToolCall& call) {
  return static_cast<int>(
      std::max<size_t>(1, (call.arguments.size() + kBytesPerToken - 1) / kBytesPerToken));
}

std::string_view ArgumentsPiece(const ToolCall& call, int index) {
  const size_t at = static_cast<size_t>(std::max(index, 0)) * kBytesPerToken;
  if (at >= call.arguments.size()) return {};
  return std::string_view(call.arguments).substr(at, kBytesPerToken);
}

std::string_view ArgumentsAfter(const ToolCall& call, int tokens) {
  const size_t n = static_cast<size_t>(std::max(tokens, 0)) * kBytesPerToken;
  return std::string_view(call.arguments).substr(0, std::min(n, call.arguments.size()));
}

}  // namespace atrium::engine_sim

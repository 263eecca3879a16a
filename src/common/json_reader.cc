#include "common/json_reader.h"

namespace atrium {

Result<Json> ParseJson(std::string_view text, int max_depth) {
  // Check nesting depth cheaply before handing the text to the parser, whose
  // recursion is otherwise bounded only by the input.
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return Error::InvalidArgument("JSON nested too deeply");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  Json parsed = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return Error::InvalidArgument("malformed JSON");
  return parsed;
}

JsonObjectReader::JsonObjectReader(const Json& value, std::string what)
    : value_(value), what_(std::move(what)) {
  if (!value_.is_object()) Fail(what_ + " must be a JSON object");
}

void JsonObjectReader::Fail(std::string message) {
  if (!error_) error_ = Error::InvalidArgument(std::move(message));
}

const Json* JsonObjectReader::Field(const std::string& name, bool required) {
  known_.insert(name);
  if (error_ || !value_.is_object()) return nullptr;
  auto it = value_.find(name);
  if (it == value_.end()) {
    if (required) Fail("missing required field '" + name + "'");
    return nullptr;
  }
  return &*it;
}

bool JsonObjectReader::IsNull(const std::string& name) {
  known_.insert(name);
  if (!value_.is_object()) return false;
  auto it = value_.find(name);
  return it != value_.end() && it->is_null();
}

std::optional<std::string> JsonObjectReader::String(const std::string& name, bool required,
                                                    size_t max_len) {
  const Json* f = Field(name, required);
  if (!f || f->is_null()) {
    if (f && required) Fail("field '" + name + "' must not be null");
    return std::nullopt;
  }
  if (!f->is_string()) {
    Fail("field '" + name + "' must be a string");
    return std::nullopt;
  }
  const auto& s = f->get_ref<const std::string&>();
  if (s.size() > max_len) {
    Fail("field '" + name + "' is longer than " + std::to_string(max_len) + " bytes");
    return std::nullopt;
  }
  return s;
}

std::optional<int64_t> JsonObjectReader::Int(const std::string& name, bool required, int64_t min,
                                             int64_t max) {
  const Json* f = Field(name, required);
  if (!f || f->is_null()) {
    if (f && required) Fail("field '" + name + "' must not be null");
    return std::nullopt;
  }
  if (!f->is_number_integer()) {
    Fail("field '" + name + "' must be an integer");
    return std::nullopt;
  }
  int64_t v;
  if (f->is_number_unsigned()) {
    uint64_t u = f->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) {
      Fail("field '" + name + "' is out of range");
      return std::nullopt;
    }
    v = static_cast<int64_t>(u);
  } else {
    v = f->get<int64_t>();
  }
  if (v < min || v > max) {
    Fail("field '" + name + "' must be between " + std::to_string(min) + " and " +
         std::to_string(max));
    return std::nullopt;
  }
  return v;
}

std::optional<double> JsonObjectReader::Number(const std::string& name, bool required, double min,
                                               double max) {
  const Json* f = Field(name, required);
  if (!f || f->is_null()) {
    if (f && required) Fail("field '" + name + "' must not be null");
    return std::nullopt;
  }
  if (!f->is_number()) {
    Fail("field '" + name + "' must be a number");
    return std::nullopt;
  }
  double v = f->get<double>();
  if (!(v >= min && v <= max)) {
    Fail("field '" + name + "' is out of range");
    return std::nullopt;
  }
  return v;
}

std::optional<bool> JsonObjectReader::Bool(const std::string& name, bool required) {
  const Json* f = Field(name, required);
  if (!f || f->is_null()) {
    if (f && required) Fail("field '" + name + "' must not be null");
    return std::nullopt;
  }
  if (!f->is_boolean()) {
    Fail("field '" + name + "' must be a boolean");
    return std::nullopt;
  }
  return f->get<bool>();
}

std::optional<std::vector<std::string>> JsonObjectReader::StringList(const std::string& name,
                                                                     bool required,
                                                                     size_t max_items,
                                                                     size_t max_len) {
  const Json* f = Field(name, required);
  if (!f || f->is_null()) {
    if (f && required) Fail("field '" + name + "' must not be null");
    return std::nullopt;
  }
  if (!f->is_array()) {
    Fail("field '" + name + "' must be an array of strings");
    return std::nullopt;
  }
  if (f->size() > max_items) {
    Fail("field '" + name + "' has more than " + std::to_string(max_items) + " items");
    return std::nullopt;
  }
  std::vector<std::string> out;
  for (const auto& item : *f) {
    if (!item.is_string() || item.get_ref<const std::string&>().size() > max_len) {
      Fail("field '" + name + "' must be an array of strings of at most " +
           std::to_string(max_len) + " bytes");
      return std::nullopt;
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::optional<std::map<std::string, std::string>> JsonObjectReader::StringMap(
    const std::string& name, bool required, size_t max_items, size_t max_len) {
  const Json* f = Field(name, required);
  if (!f || f->is_null()) {
    if (f && required) Fail("field '" + name + "' must not be null");
    return std::nullopt;
  }
  if (!f->is_object()) {
    Fail("field '" + name + "' must be an object of strings");
    return std::nullopt;
  }
  if (f->size() > max_items) {
    Fail("field '" + name + "' has more than " + std::to_string(max_items) + " entries");
    return std::nullopt;
  }
  std::map<std::string, std::string> out;
  for (auto it = f->begin(); it != f->end(); ++it) {
    if (!it.value().is_string() || it.key().size() > max_len ||
        it.value().get_ref<const std::string&>().size() > max_len) {
      Fail("field '" + name + "' must map strings to strings of at most " +
           std::to_string(max_len) + " bytes");
      return std::nullopt;
    }
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

Status JsonObjectReader::Finish() {
  if (error_) return *error_;
  for (auto it = value_.begin(); it != value_.end(); ++it) {
    if (!known_.contains(it.key())) {
      return Error::InvalidArgument("unknown field '" + it.key() + "' in " + what_);
    }
  }
  return OkStatus();
}

}  // namespace atrium

// Strict decoding of JSON request bodies: every field is declared with its
// type; an unknown field, a wrong type or a missing required field becomes an
// InvalidArgument error naming the field. Nothing throws.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace atrium {

using Json = nlohmann::json;

// Parses text as JSON without exceptions. Rejects nesting deeper than
// max_depth (a guard against stack exhaustion on hostile input).
Result<Json> ParseJson(std::string_view text, int max_depth = 32);

// Reads the fields of one JSON object. Use: construct, call the typed getters,
// then Finish() — which reports the first error seen, or the first unknown
// field. Getters return nullopt when the field is absent or after an error.
class JsonObjectReader {
 public:
  // `what` names the object in messages ("request body").
  explicit JsonObjectReader(const Json& value, std::string what = "request body");

  std::optional<std::string> String(const std::string& name, bool required = false,
                                    size_t max_len = 1024);
  std::optional<int64_t> Int(const std::string& name, bool required = false,
                             int64_t min = INT64_MIN, int64_t max = INT64_MAX);
  std::optional<double> Number(const std::string& name, bool required = false, double min = -1e300,
                               double max = 1e300);
  std::optional<bool> Bool(const std::string& name, bool required = false);
  std::optional<std::vector<std::string>> StringList(const std::string& name, bool required = false,
                                                     size_t max_items = 256, size_t max_len = 256);
  std::optional<std::map<std::string, std::string>> StringMap(const std::string& name,
                                                              bool required = false,
                                                              size_t max_items = 64,
                                                              size_t max_len = 256);
  // True if the field is present and null (to clear optional values).
  bool IsNull(const std::string& name);

  // The first error, or an unknown-field error, or OK.
  Status Finish();

 private:
  const Json* Field(const std::string& name, bool required);
  void Fail(std::string message);

  const Json& value_;
  std::string what_;
  std::set<std::string> known_;
  std::optional<Error> error_;
};

}  // namespace atrium

// Fuzzes JSON request-body decoding: the strict parser and the typed field
// reader the API handlers use, with the same shape as tenant creation.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/json_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = atrium::ParseJson(text);
  if (!parsed.has_value()) return 0;
  atrium::JsonObjectReader r(*parsed);
  (void)r.String("name", true, 63);
  (void)r.String("display_name", false, 256);
  (void)r.Int("weight", false, 1, 10000);
  (void)r.Number("ratio");
  (void)r.Bool("flag");
  (void)r.StringList("regions", false, 64, 63);
  (void)r.StringMap("labels", false, 64, 255);
  (void)r.IsNull("cleared");
  (void)r.Finish();
  return 0;
}

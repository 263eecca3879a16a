// libFuzzer target: ParseRequest runs the server's own Beast parser and
// Beast-to-Request conversion on arbitrary bytes. It must never crash, hang
// or trip a sanitizer; errors are ordinary return values.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "http/request_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const atrium::http::ServerOptions kLimits;  // the server's defaults
  std::string_view raw(reinterpret_cast<const char*>(data), size);
  auto request = atrium::http::ParseRequest(raw, kLimits);
  if (request.has_value()) {
    // Touch what the handler would see so the sanitizers check it.
    volatile size_t sink = request->path.size() + request->query_all.size() +
                           request->headers.size() + request->body.size();
    (void)sink;
  }
  return 0;
}

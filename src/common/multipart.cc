#include "common/multipart.h"

#include <algorithm>
#include <cctype>

namespace atrium {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The value of parameter `key` in "form-data; name="x"; filename="y"";
// "" when absent. Quoted values may hold escaped quotes.
bool Parameter(std::string_view header, std::string_view key, std::string& value) {
  size_t at = header.find(';');
  while (at != std::string_view::npos) {
    std::string_view rest = header.substr(at + 1);
    const size_t eq = rest.find('=');
    if (eq == std::string_view::npos) return false;
    const std::string name = Lower(Trim(rest.substr(0, eq)));
    rest = Trim(rest.substr(eq + 1));
    std::string parsed;
    size_t consumed = 0;
    if (!rest.empty() && rest.front() == '"') {
      size_t i = 1;
      for (; i < rest.size() && rest[i] != '"'; ++i) {
        if (rest[i] == '\\' && i + 1 < rest.size()) ++i;
        parsed.push_back(rest[i]);
      }
      if (i >= rest.size()) return false;  // unterminated
      consumed = i + 1;
    } else {
      consumed = std::min(rest.find(';'), rest.size());
      parsed = std::string(Trim(rest.substr(0, consumed)));
    }
    if (name == key) {
      value = std::move(parsed);
      return true;
    }
    const size_t next = rest.find(';', consumed);
    if (next == std::string_view::npos) return false;
    at = static_cast<size_t>(rest.data() - header.data()) + next;
  }
  return false;
}

}  // namespace

Result<std::string> FormBoundary(std::string_view content_type) {
  const std::string_view type = Trim(content_type.substr(0, content_type.find(';')));
  if (Lower(type) != "multipart/form-data") {
    return Error::InvalidArgument("the body must be multipart/form-data");
  }
  std::string boundary;
  if (!Parameter(content_type, "boundary", boundary) || boundary.empty() || boundary.size() > 70) {
    return Error::InvalidArgument("multipart/form-data needs a boundary of 1 to 70 characters");
  }
  for (char c : boundary) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Error::InvalidArgument("the multipart boundary holds a control character");
    }
  }
  return boundary;
}

Result<std::vector<FormPart>> ParseForm(std::string_view body, std::string_view boundary) {
  const std::string delimiter = "--" + std::string(boundary);
  auto bad = [](const std::string& what) {
    return Error::InvalidArgument("malformed multipart body: " + what);
  };
  // The first delimiter starts the body or follows a preamble's CRLF.
  size_t at = body.substr(0, delimiter.size()) == delimiter ? 0 : body.find("\r\n" + delimiter);
  if (at == std::string_view::npos) return bad("no boundary");
  if (at != 0) at += 2;
  std::vector<FormPart> parts;
  const std::string next_delimiter = "\r\n" + delimiter;
  while (true) {
    at += delimiter.size();
    if (body.substr(at, 2) == "--") return parts;  // the close delimiter
    if (body.substr(at, 2) != "\r\n") return bad("a boundary not followed by CRLF");
    at += 2;
    if (parts.size() == kMaxParts) return bad("more than " + std::to_string(kMaxParts) + " parts");
    const size_t headers_end = body.find("\r\n\r\n", at);
    // A part with no headers starts with the blank line at once.
    const bool no_headers = body.substr(at, 2) == "\r\n";
    const size_t data_start = no_headers ? at + 2 : headers_end + 4;
    if (!no_headers &&
        (headers_end == std::string_view::npos || headers_end - at > kMaxPartHeaderBytes)) {
      return bad("part headers missing or over " + std::to_string(kMaxPartHeaderBytes) + " bytes");
    }
    FormPart part;
    bool disposition = false;
    if (!no_headers) {
      std::string_view headers = body.substr(at, headers_end - at);
      while (!headers.empty()) {
        const size_t eol = std::min(headers.find("\r\n"), headers.size());
        const std::string_view line = headers.substr(0, eol);
        headers.remove_prefix(std::min(eol + 2, headers.size()));
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos) return bad("a part header without ':'");
        const std::string name = Lower(Trim(line.substr(0, colon)));
        const std::string_view value = Trim(line.substr(colon + 1));
        if (name == "content-disposition") {
          if (Lower(Trim(value.substr(0, value.find(';')))) != "form-data") {
            return bad("a part that is not form-data");
          }
          disposition = Parameter(value, "name", part.name);
          Parameter(value, "filename", part.filename);
        } else if (name == "content-type") {
          part.content_type = std::string(value);
        }
      }
    }
    if (!disposition || part.name.empty()) return bad("a part without a name");
    const size_t data_end = body.find(next_delimiter, data_start);
    if (data_end == std::string_view::npos) return bad("a part without its closing boundary");
    part.data = body.substr(data_start, data_end - data_start);
    parts.push_back(std::move(part));
    at = data_end + 2;
  }
}

}  // namespace atrium

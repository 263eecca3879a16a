#include "cli/table.h"

#include <algorithm>
#include <set>

namespace atrium::cli {

namespace {

// True if a C1 control (UTF-8 C2 80..C2 9F) starts at `i`.
bool IsC1At(std::string_view text, size_t i) {
  return i + 1 < text.size() && static_cast<unsigned char>(text[i]) == 0xC2 &&
         static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
         static_cast<unsigned char>(text[i + 1]) <= 0x9F;
}

constexpr char kHex[] = "0123456789abcdef";

}  // namespace

std::string EscapeForTerminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (IsC1At(text, i)) {
      auto code = static_cast<unsigned char>(text[i + 1]);
      out += "\\u00";
      out += kHex[code >> 4];
      out += kHex[code & 0xF];
      ++i;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string EscapeLinesForTerminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t begin = 0; begin <= text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    out += EscapeForTerminal(text.substr(begin, end - begin));
    if (end < text.size()) out += '\n';
    begin = end + 1;
  }
  return out;
}

std::string EscapeJsonForTerminal(std::string_view json_text) {
  std::string out;
  out.reserve(json_text.size());
  for (size_t i = 0; i < json_text.size(); ++i) {
    auto c = static_cast<unsigned char>(json_text[i]);
    if (IsC1At(json_text, i)) {
      auto code = static_cast<unsigned char>(json_text[i + 1]);
      out += "\\u00";
      out += kHex[code >> 4];
      out += kHex[code & 0xF];
      ++i;
    } else if (c == 0x7F) {
      out += "\\u007f";
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string CellText(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "-";
    case Json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      return s.empty() ? "-" : EscapeForTerminal(s);
    }
    case Json::value_t::array: {
      std::string out;
      for (const auto& item : value) {
        if (!out.empty()) out += ",";
        out += item.is_string() ? EscapeForTerminal(item.get<std::string>()) : CellText(item);
      }
      return out.empty() ? "-" : out;
    }
    case Json::value_t::object: {
      std::string out;
      for (const auto& [key, item] : value.items()) {
        if (!out.empty()) out += ",";
        out += EscapeForTerminal(key) + "=" +
               (item.is_string() ? EscapeForTerminal(item.get<std::string>()) : CellText(item));
      }
      return out.empty() ? "-" : out;
    }
    default:
      return value.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

std::string FormatTable(const std::vector<std::string>& raw_header,
                        const std::vector<std::vector<std::string>>& raw_rows) {
  // Escaping is idempotent on text without controls, so cells that came
  // through CellText are unchanged; anything else is made safe here.
  std::vector<std::string> header;
  header.reserve(raw_header.size());
  for (const auto& cell : raw_header) header.push_back(EscapeForTerminal(cell));
  std::vector<std::vector<std::string>> rows;
  rows.reserve(raw_rows.size());
  for (const auto& raw_row : raw_rows) {
    std::vector<std::string> row;
    row.reserve(raw_row.size());
    for (const auto& cell : raw_row) row.push_back(EscapeForTerminal(cell));
    rows.push_back(std::move(row));
  }
  std::vector<size_t> widths(header.size(), 0);
  for (size_t c = 0; c < header.size(); ++c) widths[c] = header[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < widths.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < header.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      line += cell;
      if (c + 1 < header.size()) line += std::string(widths[c] - cell.size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(header);
  for (const auto& row : rows) emit(row);
  return out;
}

Json FieldAt(const Json& object, const std::string& path) {
  const Json* at = &object;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string key =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!at->is_object()) return nullptr;
    auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
    if (dot == std::string::npos) return *at;
    start = dot + 1;
  }
}

std::string FormatObjects(const std::vector<Column>& columns, const std::vector<Json>& items) {
  std::vector<std::string> header;
  header.reserve(columns.size());
  for (const auto& column : columns) header.push_back(column.header);
  std::vector<std::vector<std::string>> rows;
  rows.reserve(items.size());
  for (const auto& item : items) {
    std::vector<std::string> row;
    row.reserve(columns.size());
    for (const auto& column : columns) row.push_back(CellText(FieldAt(item, column.field)));
    rows.push_back(std::move(row));
  }
  return FormatTable(header, rows);
}

namespace {

void Flatten(const Json& object, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  for (const auto& [key, value] : object.items()) {
    bool nested = value.is_object() && !value.empty();
    if (nested) {
      Flatten(value, prefix + EscapeForTerminal(key) + ".", out);
    } else {
      out.emplace_back(prefix + EscapeForTerminal(key), CellText(value));
    }
  }
}

}  // namespace

std::string FormatDetail(const Json& object, const std::vector<std::string>& first) {
  std::vector<std::pair<std::string, std::string>> fields;
  if (object.is_object()) Flatten(object, "", fields);
  std::vector<std::pair<std::string, std::string>> ordered;
  std::set<size_t> used;
  for (const auto& name : first) {
    for (size_t i = 0; i < fields.size(); ++i) {
      if (!used.count(i) && fields[i].first == name) {
        ordered.push_back(fields[i]);
        used.insert(i);
      }
    }
  }
  for (size_t i = 0; i < fields.size(); ++i) {
    if (!used.count(i)) ordered.push_back(fields[i]);
  }
  size_t width = 0;
  for (const auto& field : ordered) width = std::max(width, field.first.size() + 1);
  std::string out;
  for (const auto& [name, value] : ordered) {
    out += name;
    out += ':';
    out.append(width - name.size() - 1 + 2, ' ');
    out += value;
    out += '\n';
  }
  return out;
}

}  // namespace atrium::cli

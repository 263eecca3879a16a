// Text output for people: aligned tables for lists and "field: value" blocks
// for single objects. Pure functions over JSON, tested in tests/cli.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_reader.h"

namespace atrium::cli {

// `text` safe to write to a terminal: C0 control characters (escape,
// newline, tab, ...), DEL and the C1 controls (U+0080-U+009F, which some
// terminals take as escape sequences) become visible escapes ("\x1b", "\n",
// "\t", "\u009b"); everything else, other UTF-8 included, stays as it is.
// Values tenants control (names, display names, key names, error messages
// that quote them) pass through this before they reach an operator's
// terminal, so none can move the cursor, rewrite earlier lines or set the
// window title.
std::string EscapeForTerminal(std::string_view text);

// EscapeForTerminal for text of several lines (a server's explanation):
// its line breaks ("\n") are kept, everything else is escaped.
std::string EscapeLinesForTerminal(std::string_view text);

// JSON text (a dump with ensure_ascii off) with DEL and the C1 controls,
// which JSON leaves raw, written as \u escapes; still valid JSON.
std::string EscapeJsonForTerminal(std::string_view json_text);

// One cell as text, escaped for the terminal: strings as they are, null or "" as "-", numbers and
// booleans in JSON form, arrays joined with ",", objects as k=v joined with ",".
std::string CellText(const Json& value);

// Rows under a header, every cell escaped for the terminal, columns separated by two spaces and
// padded to the widest cell; the last column is not padded and lines carry no trailing blanks.
// Every line ends with '\n'. Rows shorter than the header are padded with empty cells.
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

// A table column: its header and the JSON field (or nested "a.b" path) it shows.
struct Column {
  std::string header;
  std::string field;
};

// Looks up "a.b.c" in nested objects; null when any step is missing.
Json FieldAt(const Json& object, const std::string& path);

// FormatTable over `items` (JSON objects) with one cell per column.
std::string FormatObjects(const std::vector<Column>& columns, const std::vector<Json>& items);

// One object as aligned "field: value" lines, escaped for the terminal. Fields named in `first`
// come first in that order, then the rest sorted; nested objects are flattened to "outer.inner"
// fields.
std::string FormatDetail(const Json& object, const std::vector<std::string>& first = {});

}  // namespace atrium::cli

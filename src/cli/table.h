// Text output for people: aligned tables for lists and "field: value" blocks
// for single objects. Pure functions over JSON, tested in tests/cli.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/json_reader.h"

namespace atrium::cli {

// One cell as text: strings as they are, null or "" as "-", numbers and
// booleans in JSON form, arrays joined with ",", objects as k=v joined with ",".
std::string CellText(const Json& value);

// Rows under a header, columns separated by two spaces and padded to the
// widest cell; the last column is not padded and lines carry no trailing
// blanks. Every line ends with '\n'. Rows shorter than the header are padded
// with empty cells.
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

// One object as aligned "field: value" lines. Fields named in `first` come
// first in that order, then the rest sorted; nested objects are flattened to
// "outer.inner" fields.
std::string FormatDetail(const Json& object, const std::vector<std::string>& first = {});

}  // namespace atrium::cli

#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace atrium {

std::vector<std::string_view> SplitString(std::string_view s, char sep);
bool StartsWith(std::string_view s, std::string_view prefix);
// Lower-case letters, digits and '-', 1..max_len, starting with a letter or
// digit: the shape of tenant names, usernames and label keys.
bool IsValidSlug(std::string_view s, size_t max_len = 63);
// Decodes %XX and '+' in a URL query component. Returns false on bad escapes.
bool UrlDecode(std::string_view in, std::string& out);
// Absolute, at most PATH_MAX, no NUL and no ".." component: a path that
// means what it says, whatever the current directory.
bool IsCleanAbsolutePath(std::string_view p);

}  // namespace atrium

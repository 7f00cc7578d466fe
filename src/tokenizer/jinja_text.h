#pragma once
// Python's str operations on UTF-8 text: templates index, slice and strip by code point, as Python does.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ds::jinja::text {

std::u32string decode(std::string_view utf8);
std::string encode(std::u32string_view codepoints);
void append_utf8(std::string& out, char32_t c);
size_t codepoint_count(std::string_view utf8);

// str.isspace(): the characters `\s` and str.strip() treat as whitespace.
bool is_space(char32_t c);

// str.strip/lstrip/rstrip; no chars means whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split/rsplit; no separator splits on whitespace runs and drops empty parts.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::string replace(std::string_view s, std::string_view old, std::string_view replacement, int64_t count);
// Case mapping covers ASCII letters only (documented in docs/chat-templates.md).
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);
std::string capitalize(std::string_view s);

// Python repr() of a str and of a float (shortest round trip, exponent past 1e16 or below 1e-4).
std::string repr_string(std::string_view s);
std::string repr_float(double d);
// markupsafe.escape, for `+` with a `|safe` string and the `escape` filter.
std::string html_escape(std::string_view s);

// The positions a Python slice [start:stop:step] selects from a sequence of n items.
std::vector<size_t> slice_positions(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                    std::optional<int64_t> step);

}  // namespace ds::jinja::text

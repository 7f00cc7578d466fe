#include "tokenizer/jinja_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "tokenizer/jinja_value.h"

namespace ds::jinja::text {

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto b = static_cast<unsigned char>(s[i]);
    int extra = b < 0x80 ? 0 : (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : -1;
    bool ok = extra >= 0 && i + extra < s.size();
    char32_t c = extra > 0 ? (b & (0x3F >> extra)) : b;
    for (int k = 1; ok && k <= extra; ++k) {
      auto next = static_cast<unsigned char>(s[i + k]);
      ok = (next & 0xC0) == 0x80;
      c = (c << 6) | (next & 0x3F);
    }
    // Invalid UTF-8 keeps its bytes as code points, so nothing is lost on the way back.
    out.push_back(ok ? c : b);
    i += ok ? 1 + extra : 1;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) append_utf8(out, c);
  return out;
}

size_t codepoint_count(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string cps = decode(s);
  std::u32string set = chars ? decode(*chars) : std::u32string();
  auto strippable = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  size_t begin = 0, end = cps.size();
  if (left)
    while (begin < end && strippable(cps[begin])) ++begin;
  if (right)
    while (end > begin && strippable(cps[end - 1])) --end;
  return encode(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) raise("ValueError: empty separator");
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  std::u32string cps = decode(s);
  size_t i = 0, n = cps.size();
  while (true) {
    while (i < n && is_space(cps[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      size_t end = n;
      while (end > i && is_space(cps[end - 1])) --end;
      parts.push_back(encode(std::u32string_view(cps).substr(i, end - i)));
      break;
    }
    size_t j = i;
    while (j < n && !is_space(cps[j])) ++j;
    parts.push_back(encode(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return parts;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) raise("ValueError: empty separator");
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    parts.emplace_back(s.substr(0, end));
  } else {
    std::u32string cps = decode(s);
    size_t j = cps.size();
    while (true) {
      while (j > 0 && is_space(cps[j - 1])) --j;
      if (j == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t begin = 0;
        while (begin < j && is_space(cps[begin])) ++begin;
        parts.push_back(encode(std::u32string_view(cps).substr(begin, j - begin)));
        break;
      }
      size_t i = j;
      while (i > 0 && !is_space(cps[i - 1])) --i;
      parts.push_back(encode(std::u32string_view(cps).substr(i, j - i)));
      j = i;
    }
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::string replace(std::string_view s, std::string_view old, std::string_view replacement, int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {
    // Python inserts the replacement before every character and at the end.
    std::u32string cps = decode(s);
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out += replacement;
    return out;
  }
  size_t start = 0;
  while (count < 0 || done < count) {
    size_t at = s.find(old, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out += replacement;
    start = at + old.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

static bool ascii_lower(char c) {
  return c >= 'a' && c <= 'z';
}
static bool ascii_upper(char c) {
  return c >= 'A' && c <= 'Z';
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (ascii_lower(c)) c = static_cast<char>(c - 32);
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (ascii_upper(c)) c = static_cast<char>(c + 32);
  return out;
}

std::string title(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    bool cased = ascii_lower(c) || ascii_upper(c);
    if (cased) c = previous_cased ? lower(std::string(1, c))[0] : upper(std::string(1, c))[0];
    previous_cased = cased;
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out = lower(s);
  if (!out.empty() && ascii_lower(out[0])) out[0] = static_cast<char>(out[0] - 32);
  return out;
}

// Python's str.isprintable, approximated: controls, separators and common format characters are not.
static bool printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB))
    return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || c >= 0xF0000 || c == 0xFFFE || c == 0xFFFF) return false;
  if (c == 0x61C || c == 0x180E || (c >= 0xE0000 && c <= 0xE007F)) return false;
  return true;
}

std::string repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (printable(c)) {
      append_utf8(out, c);
    } else if (c < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
    }
  }
  out.push_back(quote);
  return out;
}

std::string repr_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, result.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exponent = std::stoi(sci.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += fmt::format(".{}", digits.substr(1));
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out;
  }
  int point = exponent + 1;  // digits before the decimal point
  if (point <= 0) return fmt::format("{}0.{}{}", out, std::string(-point, '0'), digits);
  if (point >= static_cast<int>(digits.size()))
    return out + digits + std::string(point - digits.size(), '0') + ".0";
  return fmt::format("{}{}.{}", out, digits.substr(0, point), digits.substr(point));
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::vector<size_t> slice_positions(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                    std::optional<int64_t> step) {
  int64_t st = step.value_or(1);
  if (st == 0) raise("ValueError: slice step cannot be zero");
  auto adjust = [&](std::optional<int64_t> v, int64_t fallback, int64_t low, int64_t high) {
    if (!v) return fallback;
    int64_t x = *v < 0 ? *v + n : *v;
    return std::clamp(x, low, high);
  };
  std::vector<size_t> out;
  if (st > 0) {
    int64_t b = adjust(start, 0, 0, n), e = adjust(stop, n, 0, n);
    for (int64_t i = b; i < e; i += st) out.push_back(static_cast<size_t>(i));
  } else {
    int64_t b = adjust(start, n - 1, -1, n - 1), e = adjust(stop, -1, -1, n - 1);
    for (int64_t i = b; i > e; i += st) out.push_back(static_cast<size_t>(i));
  }
  return out;
}

}  // namespace ds::jinja::text

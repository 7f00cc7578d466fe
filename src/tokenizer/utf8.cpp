#include "tokenizer/utf8.h"

namespace ds::utf8 {
namespace {

// The second byte's allowed range for each lead byte (Unicode Table 3-7); later bytes are always 80..BF.
struct Lead {
  int length;
  unsigned char lo, hi;
};

Lead lead_of(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes from s[i] fit a prefix of a well-formed sequence (at most the sequence's length).
size_t fitting_prefix(std::string_view s, size_t i, const Lead& lead) {
  size_t k = 1;
  for (; k < static_cast<size_t>(lead.length) && i + k < s.size(); ++k) {
    auto c = static_cast<unsigned char>(s[i + k]);
    bool ok = k == 1 ? (c >= lead.lo && c <= lead.hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) break;
  }
  return k;
}

}  // namespace

size_t sequence_length(std::string_view s, size_t i) {
  Lead lead = lead_of(static_cast<unsigned char>(s[i]));
  if (lead.length <= 1) return static_cast<size_t>(lead.length);
  size_t k = fitting_prefix(s, i, lead);
  return k == static_cast<size_t>(lead.length) ? k : 0;
}

size_t maximal_subpart(std::string_view s, size_t i) {
  Lead lead = lead_of(static_cast<unsigned char>(s[i]));
  if (lead.length <= 1) return 1;
  return fitting_prefix(s, i, lead);
}

bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void append_valid(std::string& out, std::string_view s) {
  size_t run = 0;  // start of the pending run of valid bytes, copied in one go
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = sequence_length(s, i);
    if (n != 0) {
      i += n;
      continue;
    }
    out.append(s.substr(run, i - run));
    out.append("\xEF\xBF\xBD");
    i += maximal_subpart(s, i);
    run = i;
  }
  out.append(s.substr(run));
}

std::string to_valid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  append_valid(out, s);
  return out;
}

size_t incomplete_tail(std::string_view s) {
  // A sequence is at most 4 bytes, so only a lead among the last 3 bytes can still be waiting.
  size_t from = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = from; i < s.size(); ++i) {
    Lead lead = lead_of(static_cast<unsigned char>(s[i]));
    if (lead.length <= 1) continue;
    size_t k = fitting_prefix(s, i, lead);
    if (i + k == s.size() && k < static_cast<size_t>(lead.length)) return k;
  }
  return 0;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace ds::utf8

#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace ds::byte_level {
namespace {

struct Tables {
  std::array<char32_t, 256> char_of{};
  std::array<int16_t, 324> byte_of{};  // code points 0..323 cover the alphabet; -1 elsewhere

  Tables() {
    byte_of.fill(-1);
    // Printable bytes keep their own code point; the rest are moved past 255 in byte order.
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      char32_t c = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
      char_of[b] = c;
      byte_of[c] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t char_of(uint8_t b) {
  return tables().char_of[b];
}

std::optional<std::string> to_bytes(std::string_view token) {
  const Tables& t = tables();
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    if (utf8::sequence_length(token, i) == 0) return std::nullopt;
    char32_t c = utf8::next(token, i);
    if (c >= t.byte_of.size() || t.byte_of[c] < 0) return std::nullopt;
    out.push_back(static_cast<char>(t.byte_of[c]));
  }
  return out;
}

std::string from_bytes(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) utf8::append(out, char_of(static_cast<uint8_t>(b)));
  return out;
}

std::string decoder_bytes(std::string_view token) {
  auto bytes = to_bytes(token);
  return bytes ? *bytes : std::string(token);
}

}  // namespace ds::byte_level

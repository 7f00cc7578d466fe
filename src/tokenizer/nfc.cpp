#include "tokenizer/nfc.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "core/error.h"
#include "tokenizer/unicode_classes.h"
#include "tokenizer/utf8.h"

namespace ds {
namespace {

// Code points from U+0300 on that may change under NFC; everything below U+0300 is stable by itself and only
// changes when followed by one of these.
class Unstable {
 public:
  Unstable() : bits_(0x110000 / 64, 0) {
    for (char32_t cp = 0x300; cp < 0x110000; ++cp) {
      const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
      bool canonical_decomposition = p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0;
      // utf8proc marks the second character of a composition pair with comb_index >= 0x8000.
      bool composes_with_previous = p->comb_index != UINT16_MAX && p->comb_index >= 0x8000;
      bool hangul_vowel_or_trail = (cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2);
      if (canonical_decomposition || composes_with_previous || hangul_vowel_or_trail ||
          p->combining_class != 0) {
        bits_[cp / 64] |= uint64_t{1} << (cp % 64);
      }
    }
  }
  bool operator()(char32_t cp) const { return (bits_[cp / 64] >> (cp % 64)) & 1; }

 private:
  std::vector<uint64_t> bits_;
};

const Unstable& unstable() {
  static const Unstable table;
  return table;
}

}  // namespace

bool nfc_quick_check(std::string_view text) {
  size_t i = 0;
  // Lead bytes below 0xCC encode code points below U+0300.
  while (i < text.size() && static_cast<unsigned char>(text[i]) < 0xCC) ++i;
  if (i == text.size()) return true;
  const Unstable& table = unstable();
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0xCC) {
      ++i;
      continue;
    }
    if (table(utf8::next(text, i))) return false;
  }
  return true;
}

namespace {

std::string utf8proc_nfc(std::string_view text) {
  if (text.empty()) return {};
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &out,
                                    static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("NFC normalization of a {}-byte text failed: {}", text.size(), utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

}  // namespace

std::string nfc(std::string_view text) {
  if (nfc_quick_check(text)) return std::string(text);
  // HF's tables predate some marks and composites; to HF they are plain starters that block reordering and
  // composition, so the text is normalized piecewise between them and they are kept as they are.
  std::string out;
  size_t piece = 0;
  for (size_t i = 0; i < text.size();) {
    size_t at = i;
    char32_t cp = utf8::next(text, i);
    if (cp >= 0x300 && unicode::contains(unicode::CodepointClass::nfc_inert, cp)) {
      out += utf8proc_nfc(text.substr(piece, at - piece));
      out.append(text.substr(at, i - at));
      piece = i;
    }
  }
  out += utf8proc_nfc(text.substr(piece));
  return out;
}

}  // namespace ds

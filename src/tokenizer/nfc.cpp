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

// UAX #15's NFC_Quick_Check "No" or "Maybe" for code points from U+0300 on (none below is either): those that
// never survive NFC, and those that may compose with the character before them.
class QuickCheck {
 public:
  QuickCheck() : bits_(0x110000 / 64, 0) {
    std::string one;
    for (char32_t cp = 0x300; cp < 0x110000; ++cp) {
      const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
      bool no = false;
      if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) {
        one.clear();
        utf8::append(one, cp);
        no = utf8proc_nfc(one) != one;
      }
      // utf8proc marks the second character of a composition pair with comb_index >= 0x8000.
      bool maybe = (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) ||
                   (cp >= 0x1161 && cp <= 0x1175) ||
                   (cp >= 0x11A8 && cp <= 0x11C2);  // Hangul vowels and trailing consonants compose by rule
      if (no || maybe) bits_[cp / 64] |= uint64_t{1} << (cp % 64);
    }
  }
  bool no_or_maybe(char32_t cp) const { return (bits_[cp / 64] >> (cp % 64)) & 1; }

 private:
  std::vector<uint64_t> bits_;
};

const QuickCheck& quick_check_table() {
  static const QuickCheck table;
  return table;
}

}  // namespace

bool nfc_quick_check(std::string_view text) {
  size_t i = 0;
  // Lead bytes below 0xCC encode code points below U+0300: NFC_QC Yes and combining class 0.
  while (i < text.size() && static_cast<unsigned char>(text[i]) < 0xCC) ++i;
  if (i == text.size()) return true;
  const QuickCheck& table = quick_check_table();
  int last_class = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0xCC) {
      ++i;
      last_class = 0;
      continue;
    }
    char32_t cp = utf8::next(text, i);
    int cls = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class;
    if ((cls != 0 && last_class > cls) || table.no_or_maybe(cp)) return false;
    last_class = cls;
  }
  return true;
}

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

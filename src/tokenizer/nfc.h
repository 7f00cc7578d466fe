#pragma once
// Unicode NFC as HF's "NFC" normalizer does it: utf8proc, skipped for text NFC cannot change, and cut at the
// code points HF's older tables do not know (unicode_classes' nfc_inert).
#include <string>
#include <string_view>

namespace ds {

// True when NFC(text) == text is certain from UAX #15's quick check (every code point NFC_QC=Yes, combining
// classes in order). Text must be valid UTF-8.
bool nfc_quick_check(std::string_view text);

// NFC of valid UTF-8 text.
std::string nfc(std::string_view text);

}  // namespace ds

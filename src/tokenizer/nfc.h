#pragma once
// Unicode NFC as HF's "NFC" normalizer does it: utf8proc, skipped for text NFC cannot change, and cut at the
// code points HF's older tables do not know (unicode_classes' nfc_inert).
#include <string>
#include <string_view>

namespace ds {

// True when NFC(text) == text is certain from a per-code-point check (no decomposition, no nonzero combining
// class, nothing that composes with a preceding character). Text must be valid UTF-8.
bool nfc_quick_check(std::string_view text);

// NFC of valid UTF-8 text.
std::string nfc(std::string_view text);

}  // namespace ds

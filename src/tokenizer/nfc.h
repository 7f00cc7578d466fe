#pragma once
// Unicode NFC (HF's "NFC" normalizer) on utf8proc, skipping the library call for text that NFC cannot change.
#include <string>
#include <string_view>

namespace ds {

// True when NFC(text) == text is certain from a per-code-point check (no decomposition, no nonzero combining
// class, nothing that composes with a preceding character). Text must be valid UTF-8.
bool nfc_quick_check(std::string_view text);

// NFC of valid UTF-8 text.
std::string nfc(std::string_view text);

}  // namespace ds

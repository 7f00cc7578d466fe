#pragma once
// GPT-2's byte-level alphabet: every byte has a printable code point, so a vocabulary of byte strings can be
// stored as text. The C++ side works on raw bytes and converts only when loading and when naming tokens.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ds::byte_level {

// The code point that stands for byte b.
char32_t char_of(uint8_t b);

// The bytes a byte-level token string stands for, or nullopt when a char is outside the alphabet.
std::optional<std::string> to_bytes(std::string_view token);

// The byte-level spelling of raw bytes (the inverse of to_bytes).
std::string from_bytes(std::string_view bytes);

// What HF's ByteLevel decoder turns one token into: its bytes, or its own UTF-8 when a char is outside the
// alphabet (HF keeps such a token as it is).
std::string decoder_bytes(std::string_view token);

}  // namespace ds::byte_level

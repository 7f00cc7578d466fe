#include "tokenizer/hf_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/unicode_classes.h"

namespace ds {
namespace {

using unicode::CodepointClass;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// The body of a character class (no brackets) listing every range of c.
std::string class_body(CodepointClass c) {
  std::string out;
  for (const auto& r : unicode::ranges(c)) {
    out += fmt::format("\\x{{{:X}}}", static_cast<uint32_t>(r.first));
    if (r.last != r.first) out += fmt::format("-\\x{{{:X}}}", static_cast<uint32_t>(r.last));
  }
  return out;
}

// The class a \p{NAME} names, when it is one that unicode_classes carries.
bool property_class(std::string_view name, CodepointClass& c) {
  if (name == "L" || name == "Letter") {
    c = CodepointClass::letter;
  } else if (name == "N" || name == "Number") {
    c = CodepointClass::number;
  } else if (name == "M" || name == "Mark") {
    c = CodepointClass::mark;
  } else {
    return false;
  }
  return true;
}

}  // namespace

std::string translate_hf_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() * 4);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char ch = p[i];
    if (ch == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      if ((e == 'p' || e == 'P') && i + 2 < p.size() && p[i + 2] == '{') {
        size_t close = p.find('}', i + 3);
        if (close == std::string_view::npos) fail("tokenizer regex: unterminated \\{} in '{}'", e, p);
        std::string_view name = p.substr(i + 3, close - i - 3);
        CodepointClass c;
        if (!property_class(name, c)) {
          out.append(p.substr(i, close + 1 - i));  // other properties fall back to PCRE2's own tables
        } else if (in_class && e == 'P') {
          fail("tokenizer regex: \\P{{{}}} inside a character class is not supported in '{}'", name, p);
        } else if (in_class) {
          out += class_body(c);
        } else {
          out += (e == 'p' ? "[" : "[^") + class_body(c) + "]";
        }
        i = close;
        continue;
      }
      if (e == 's' || e == 'S') {
        if (in_class && e == 'S')
          fail("tokenizer regex: \\S inside a character class is not supported in '{}'", p);
        std::string body = class_body(CodepointClass::space);
        out += in_class ? body : (e == 's' ? "[" : "[^") + body + "]";
        ++i;
        continue;
      }
      out.push_back(ch);
      out.push_back(e);
      ++i;
      continue;
    }
    if (in_class) {
      if (ch == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {
          size_t close = p.find(":]", i + 2);
          if (close == std::string_view::npos) fail("tokenizer regex: unterminated [: in '{}'", p);
          out.append(p.substr(i, close + 2 - i));
          i = close + 1;
          continue;
        }
        fail("tokenizer regex: nested character classes are not supported in '{}'", p);
      }
      if (ch == '&' && i + 1 < p.size() && p[i + 1] == '&') {
        fail("tokenizer regex: class intersection (&&) is not supported in '{}'", p);
      }
      if (ch == ']') in_class = false;
      out.push_back(ch);
      continue;
    }
    out.push_back(ch);
    if (ch == '[') {
      in_class = true;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
    }
  }
  if (in_class) fail("tokenizer regex: unterminated character class in '{}'", p);
  return out;
}

struct HfRegex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {

// Per-thread match state: match data, and a JIT stack larger than the default for long whitespace runs.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

HfRegex HfRegex::from_pattern(std::string_view pattern) {
  std::string translated = translate_hf_pattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto code = std::make_shared<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                             PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code->code == nullptr) {
    fail("tokenizer regex '{}' does not compile on PCRE2: {} (at offset {} of the translation)", pattern,
         pcre2_message(error), offset);
  }
  code->jit = pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE) == 0;
  HfRegex r;
  r.code_ = std::move(code);
  r.source_ = pattern;
  return r;
}

HfRegex HfRegex::from_literal(std::string_view literal) {
  std::string escaped;
  for (char c : literal) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 static_cast<unsigned char>(c) >= 0x80;
    if (!plain) escaped.push_back('\\');
    escaped.push_back(c);
  }
  return from_pattern(escaped);
}

bool HfRegex::find(std::string_view text, size_t from, size_t& start, size_t& end) const {
  MatchState& state = match_state();
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (from < text.size()) {
    int rc = code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK,
                                          state.data, state.context)
                        : pcre2_match(code_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, state.data,
                                      state.context);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0)
      fail("tokenizer regex '{}' failed on a {}-byte text: {}", source_, text.size(), pcre2_message(rc));
    PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    if (ovector[1] > ovector[0]) {
      start = ovector[0];
      end = ovector[1];
      return true;
    }
    // An empty match yields no piece (HF drops empty splits); look again one code point further on.
    from = ovector[0] + 1;
    while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
  }
  return false;
}

}  // namespace ds

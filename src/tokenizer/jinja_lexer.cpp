#include "tokenizer/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>

#include "core/error.h"
#include "tokenizer/jinja_text.h"

namespace ds::jinja {

namespace {

// jinja2 splits on \r\n, \r and \n, joins with \n, and drops one trailing newline
// (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;  // jinja2: did the previous match end with a newline?
    while (pos < src_.size()) {
      size_t at = find_tag(pos);
      if (at == std::string::npos) {
        push_data(src_.substr(pos), pos);
        break;
      }
      char kind = src_[at + 1];
      char sign = at + 2 < src_.size() && (src_[at + 2] == '-' || src_[at + 2] == '+') ? src_[at + 2] : 0;
      size_t inner = at + 2 + (sign ? 1 : 0);
      size_t raw_end = kind == '%' ? match_raw_begin(inner) : std::string::npos;
      std::string text = src_.substr(pos, at - pos);
      strip_before_tag(text, sign, kind != '{', line_starting);
      push_data(text, pos);
      if (kind == '#') {
        pos = skip_comment(inner, at);
      } else if (raw_end != std::string::npos) {
        pos = lex_raw(raw_end, line_starting);
      } else {
        pos = lex_tag(at, inner, kind == '%');
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    Token eof{TokenType::Eof, "", 0, 0.0, loc(src_.size())};
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  Loc loc(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t start = *(it - 1);
    int column =
        static_cast<int>(text::codepoint_count(std::string_view(src_).substr(start, offset - start)));
    return Loc{static_cast<int>(it - line_starts_.begin()), column + 1};
  }

  [[noreturn]] void error(size_t offset, const std::string& what) const {
    Loc l = loc(offset);
    ds::fail("chat template syntax error at line {}, column {}: {}", l.line, l.column, what);
  }

  size_t find_tag(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // Byte length of the whitespace character at pos (Python's \s), or 0.
  size_t space_at(size_t pos) const {
    if (pos >= src_.size()) return 0;
    auto b = static_cast<unsigned char>(src_[pos]);
    if (b < 0x80) return text::is_space(b) ? 1 : 0;
    size_t n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    std::u32string cp = text::decode(std::string_view(src_).substr(pos, n));
    return cp.size() == 1 && text::is_space(cp[0]) ? n : 0;
  }

  size_t skip_spaces(size_t pos) const {
    while (size_t n = space_at(pos)) pos += n;
    return pos;
  }

  bool starts_with(size_t pos, std::string_view what) const {
    return src_.compare(pos, what.size(), what) == 0;
  }

  // `{%-` strips all whitespace before the tag; lstrip_blocks strips a block's indentation on its own line.
  void strip_before_tag(std::string& text, char sign, bool is_block_or_comment, bool line_starting) const {
    if (sign == '-') {
      text = text::strip(text, std::nullopt, false, true);
      return;
    }
    if (sign == '+' || !is_block_or_comment) return;
    size_t line_pos = text.rfind('\n');
    line_pos = line_pos == std::string::npos ? 0 : line_pos + 1;
    if (line_pos == 0 && !line_starting) return;
    if (line_pos == text.size()) return;
    std::u32string rest = text::decode(std::string_view(text).substr(line_pos));
    if (std::all_of(rest.begin(), rest.end(), text::is_space)) text.resize(line_pos);
  }

  void push_data(const std::string& text, size_t offset) {
    if (!text.empty()) tokens_.push_back(Token{TokenType::Data, text, 0, 0.0, loc(offset)});
  }

  // End of a block tag at pos: `+%}` keeps what follows, `-%}` eats whitespace, `%}` eats one newline.
  size_t match_block_end(size_t pos) const {
    if (starts_with(pos, "+%}")) return pos + 3;
    if (starts_with(pos, "-%}")) return skip_spaces(pos + 3);
    if (starts_with(pos, "%}")) return pos + 2 + (starts_with(pos + 2, "\n") ? 1 : 0);
    return std::string::npos;
  }

  size_t match_variable_end(size_t pos) const {
    if (starts_with(pos, "-}}")) return skip_spaces(pos + 3);
    if (starts_with(pos, "}}")) return pos + 2;
    return std::string::npos;
  }

  // `{% raw %}`: returns the offset after the opening tag, or npos when this is not a raw block.
  size_t match_raw_begin(size_t inner) const {
    size_t p = skip_spaces(inner);
    if (!starts_with(p, "raw")) return std::string::npos;
    p = skip_spaces(p + 3);
    if (starts_with(p, "-%}")) return skip_spaces(p + 3);
    if (starts_with(p, "%}")) return p + 2;
    return std::string::npos;
  }

  size_t lex_raw(size_t pos, bool line_starting) {
    for (size_t at = src_.find("{%", pos); at != std::string::npos; at = src_.find("{%", at + 1)) {
      char sign = at + 2 < src_.size() && (src_[at + 2] == '-' || src_[at + 2] == '+') ? src_[at + 2] : 0;
      size_t p = skip_spaces(at + 2 + (sign ? 1 : 0));
      if (!starts_with(p, "endraw")) continue;
      size_t end = match_block_end(skip_spaces(p + 6));
      if (end == std::string::npos) continue;
      std::string text = src_.substr(pos, at - pos);
      strip_before_tag(text, sign, true, line_starting);
      push_data(text, pos);
      return end;
    }
    error(pos, "missing end of raw directive");
  }

  size_t skip_comment(size_t pos, size_t start) const {
    for (size_t p = pos; p + 1 < src_.size(); ++p) {
      if (starts_with(p, "+#}")) return p + 3;
      if (starts_with(p, "-#}")) return skip_spaces(p + 3);
      if (starts_with(p, "#}")) return p + 2 + (starts_with(p + 2, "\n") ? 1 : 0);
    }
    error(start, "missing end of comment tag");
  }

  size_t lex_tag(size_t start, size_t pos, bool block) {
    tokens_.push_back(
        Token{block ? TokenType::BlockBegin : TokenType::VariableBegin, "", 0, 0.0, loc(start)});
    std::vector<char> brackets;
    while (true) {
      if (brackets.empty()) {
        size_t end = block ? match_block_end(pos) : match_variable_end(pos);
        if (end != std::string::npos) {
          tokens_.push_back(
              Token{block ? TokenType::BlockEnd : TokenType::VariableEnd, "", 0, 0.0, loc(pos)});
          return end;
        }
      }
      if (size_t n = space_at(pos)) {
        pos = skip_spaces(pos + n);
        continue;
      }
      if (pos >= src_.size()) error(start, block ? "unclosed '{%' tag" : "unclosed '{{' tag");
      char c = src_[pos];
      if (c >= '0' && c <= '9') {
        pos = lex_number(pos);
      } else if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        size_t end = pos;
        while (end < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
          ++end;
        tokens_.push_back(Token{TokenType::Name, src_.substr(pos, end - pos), 0, 0.0, loc(pos)});
        pos = end;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        pos = lex_operator(pos, brackets);
      }
    }
  }

  size_t scan_digits(size_t pos) const {
    // (\d+_)*\d+ : digits with single underscores between them.
    size_t p = pos;
    while (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
      ++p;
      if (p + 1 < src_.size() && src_[p] == '_' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) ++p;
    }
    return p;
  }

  size_t lex_number(size_t pos) {
    size_t end = scan_digits(pos);
    bool is_float = false;
    bool after_dot = pos > 0 && src_[pos - 1] == '.';  // float_re's (?<!\.)
    if (!after_dot && end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      end = scan_digits(end + 1);
      is_float = true;
    }
    if (!after_dot && end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t p = end + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        end = scan_digits(p);
        is_float = true;
      }
    }
    std::string digits;
    for (size_t i = pos; i < end; ++i)
      if (src_[i] != '_') digits.push_back(src_[i]);
    Token token{is_float ? TokenType::Float : TokenType::Integer, src_.substr(pos, end - pos), 0, 0.0,
                loc(pos)};
    if (is_float) {
      std::from_chars(digits.data(), digits.data() + digits.size(), token.number);
    } else {
      int base = 10;
      if (digits.size() > 1 && digits[0] == '0' && std::strchr("xXoObB", digits[1])) {
        // 0x / 0o / 0b literals: rescan, since scan_digits stopped at the letter.
        base = (digits[1] == 'x' || digits[1] == 'X') ? 16 : (digits[1] == 'o' || digits[1] == 'O') ? 8 : 2;
        end = pos + 2;
        while (end < src_.size() &&
               (std::isxdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
          ++end;
        digits.clear();
        for (size_t i = pos + 2; i < end; ++i)
          if (src_[i] != '_') digits.push_back(src_[i]);
      }
      auto result = std::from_chars(digits.data(), digits.data() + digits.size(), token.integer, base);
      if (result.ec != std::errc())
        error(pos, fmt::format("integer literal '{}' is out of range", token.text));
      token.text = src_.substr(pos, end - pos);
    }
    tokens_.push_back(token);
    return end;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Python's unicode-escape decoding, which jinja2 applies to string literals.
  size_t lex_string(size_t pos) {
    char quote = src_[pos];
    std::string value;
    size_t p = pos + 1;
    while (true) {
      if (p >= src_.size()) error(pos, "unterminated string literal");
      char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) error(pos, "unterminated string literal");
      char e = src_[p + 1];
      p += 2;
      switch (e) {
        case '\n':
          break;
        case '\\':
          value.push_back('\\');
          break;
        case '\'':
          value.push_back('\'');
          break;
        case '"':
          value.push_back('"');
          break;
        case 'a':
          value.push_back('\a');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'n':
          value.push_back('\n');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          int width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t code = 0;
          for (int k = 0; k < width; ++k) {
            int h = p + k < src_.size() ? hex_value(src_[p + k]) : -1;
            if (h < 0) error(pos, fmt::format("truncated \\{} escape in string literal", e));
            code = code * 16 + static_cast<char32_t>(h);
          }
          if (code > 0x10FFFF) error(pos, "illegal Unicode character in string literal");
          text::append_utf8(value, code);
          p += width;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t code = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k, ++p)
              code = code * 8 + static_cast<char32_t>(src_[p] - '0');
            text::append_utf8(value, code);
          } else {
            value.push_back('\\');  // unknown escapes stay as written
            value.push_back(e);
          }
      }
    }
    tokens_.push_back(Token{TokenType::String, value, 0, 0.0, loc(pos)});
    return p + 1;
  }

  size_t lex_operator(size_t pos, std::vector<char>& brackets) {
    static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two) {
      if (starts_with(pos, op)) {
        tokens_.push_back(Token{TokenType::Operator, op, 0, 0.0, loc(pos)});
        return pos + 2;
      }
    }
    char c = src_[pos];
    if (!std::strchr("+-/*%~[](){}=.:|,;<>", c)) {
      error(pos, fmt::format("unexpected character '{}'",
                             text::encode(text::decode(src_.substr(pos, 4)).substr(0, 1))));
    }
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) error(pos, fmt::format("unexpected '{}'", c));
      if (brackets.back() != c) error(pos, fmt::format("unexpected '{}', expected '{}'", c, brackets.back()));
      brackets.pop_back();
    }
    tokens_.push_back(Token{TokenType::Operator, std::string(1, c), 0, 0.0, loc(pos)});
    return pos + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(source).run();
}

std::string describe(const Token& token) {
  switch (token.type) {
    case TokenType::Data:
      return "template text";
    case TokenType::VariableBegin:
      return "'{{'";
    case TokenType::VariableEnd:
      return "end of print statement '}}'";
    case TokenType::BlockBegin:
      return "'{%'";
    case TokenType::BlockEnd:
      return "end of statement block '%}'";
    case TokenType::Eof:
      return "end of template";
    case TokenType::String:
      return "string literal";
    default:
      return fmt::format("'{}'", token.text);
  }
}

}  // namespace ds::jinja

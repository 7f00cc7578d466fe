#include "server/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "server/stop_strings.h"

namespace ds::server {

namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

enum class Match { NeedMore, No, Yes };

// `{"name": "NAME", "arguments": ` followed by the value's first character: the call can be given out now.
Match match_header(std::string_view s, std::string& name, size_t& value_start) {
  size_t i = 0;
  auto skip_space = [&] {
    while (i < s.size() && is_space(s[i])) ++i;
  };
  auto literal = [&](std::string_view word) {
    size_t n = std::min(word.size(), s.size() - i);
    if (s.substr(i, n) != word.substr(0, n)) return Match::No;
    if (n < word.size()) return Match::NeedMore;
    i += word.size();
    return Match::Yes;
  };
  for (std::string_view word : {"{", "\"name\"", ":", "\""}) {
    skip_space();
    if (Match m = literal(word); m != Match::Yes) return m;
  }
  size_t name_start = i - 1;
  for (bool escaped = false; i < s.size() && (escaped || s[i] != '"'); ++i)
    escaped = !escaped && s[i] == '\\';
  if (i == s.size()) return Match::NeedMore;
  nlohmann::json decoded = nlohmann::json::parse(s.substr(name_start, i + 1 - name_start), nullptr, false);
  if (!decoded.is_string()) return Match::No;
  ++i;
  for (std::string_view word : {",", "\"arguments\"", ":"}) {
    skip_space();
    if (Match m = literal(word); m != Match::Yes) return m;
  }
  skip_space();
  if (i == s.size()) return Match::NeedMore;
  name = decoded.get<std::string>();
  value_start = i;
  return Match::Yes;
}

// A whole block that did not start with the name: {"name", "arguments"} in any order.
bool parse_call(std::string_view body, ToolCall& call) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  call.name = j["name"].get<std::string>();
  nlohmann::ordered_json args = j.value("arguments", nlohmann::ordered_json::object());
  call.arguments = args.is_string() ? args.get<std::string>()
                                    : args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return true;
}

}  // namespace

void ToolCallExtractor::emit(ToolText& out, ToolCall piece) {
  if (piece.id.empty() && piece.arguments.empty()) return;
  if (!out.calls.empty() && out.calls.back().index == piece.index && piece.id.empty()) {
    out.calls.back().arguments += piece.arguments;
    return;
  }
  out.calls.push_back(std::move(piece));
}

ToolText ToolCallExtractor::push(std::string_view text) {
  ToolText out;
  if (!enabled_) {
    out.content = text;
    return out;
  }
  held_ += text;
  for (bool more = true; more;) {
    switch (mode_) {
      case Mode::Text:
        more = step_text(out);
        break;
      case Mode::Header:
        more = step_header(out);
        break;
      case Mode::Arguments:
        more = step_arguments(out);
        break;
      case Mode::StringArguments:
        more = step_string_arguments(out);
        break;
      case Mode::AfterArguments:
      case Mode::Block:
        more = step_to_close(out);
        break;
    }
  }
  return out;
}

bool ToolCallExtractor::step_text(ToolText& out) {
  size_t open = held_.find(kOpen);
  if (open == std::string::npos) {
    size_t keep = partial_tag(held_, kOpen);
    out.content += held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return false;
  }
  out.content += held_.substr(0, open);
  held_.erase(0, open + kOpen.size());
  mode_ = Mode::Header;
  return true;
}

bool ToolCallExtractor::step_header(ToolText& out) {
  std::string name;
  size_t value_start = 0;
  switch (match_header(held_, name, value_start)) {
    case Match::NeedMore:
      // A block that never shows its name within reason is parsed whole when it closes.
      if (held_.find(kClose) == std::string::npos) return false;
      mode_ = Mode::Block;
      return true;
    case Match::No:
      mode_ = Mode::Block;
      return true;
    case Match::Yes:
      break;
  }
  emit(out, {count_, fmt::format("call_{}", count_), name, ""});
  ++count_;
  held_.erase(0, value_start);
  mode_ = held_[0] == '"' ? Mode::StringArguments : Mode::Arguments;
  depth_ = 0;
  in_string_ = escaped_ = false;
  return true;
}

bool ToolCallExtractor::step_arguments(ToolText& out) {
  const int index = count_ - 1;
  auto finish_at = [&](size_t end) {
    emit(out, {index, "", "", held_.substr(0, end)});
    held_.erase(0, end);
    mode_ = Mode::AfterArguments;
    return true;
  };
  for (size_t i = 0; i < held_.size(); ++i) {
    char c = held_[i];
    if (in_string_) {
      if (escaped_)
        escaped_ = false;
      else if (c == '\\')
        escaped_ = true;
      else if (c == '"')
        in_string_ = false;
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      if (depth_ == 0) return finish_at(i);  // a bare value ended; this closes the call object
      if (--depth_ == 0) return finish_at(i + 1);
    } else if (depth_ == 0 && (c == ',' || is_space(c))) {
      return finish_at(i);
    } else if (c == '<') {
      std::string_view rest = std::string_view(held_).substr(i);
      if (rest.starts_with(kClose)) return finish_at(i);  // cut short: the block closed mid-value
      if (kClose.starts_with(rest)) {
        emit(out, {index, "", "", held_.substr(0, i)});
        held_.erase(0, i);
        return false;
      }
    }
  }
  emit(out, {index, "", "", held_});
  held_.clear();
  return false;
}

bool ToolCallExtractor::step_string_arguments(ToolText& out) {
  size_t i = 1;
  for (bool escaped = false; i < held_.size() && (escaped || held_[i] != '"'); ++i)
    escaped = !escaped && held_[i] == '\\';
  if (i == held_.size()) return false;
  // Arguments given as a JSON string hold the JSON text itself.
  nlohmann::json decoded = nlohmann::json::parse(held_.substr(0, i + 1), nullptr, false);
  emit(out, {count_ - 1, "", "", decoded.is_string() ? decoded.get<std::string>() : held_.substr(0, i + 1)});
  held_.erase(0, i + 1);
  mode_ = Mode::AfterArguments;
  return true;
}

bool ToolCallExtractor::step_to_close(ToolText& out) {
  size_t close = held_.find(kClose);
  if (close == std::string::npos) {
    // What follows a call's arguments up to </tool_call> is the object's closing brace: not kept.
    if (mode_ == Mode::AfterArguments) held_.erase(0, held_.size() - partial_tag(held_, kClose));
    return false;
  }
  if (mode_ == Mode::AfterArguments) {
    ++out.closed;
  } else if (ToolCall call; parse_call(std::string_view(held_).substr(0, close), call)) {
    call.index = count_;
    call.id = fmt::format("call_{}", count_++);
    out.calls.push_back(std::move(call));
    ++out.closed;
  } else {
    out.content += std::string(kOpen) + held_.substr(0, close + kClose.size());
  }
  held_.erase(0, close + kClose.size());
  mode_ = Mode::Text;
  return true;
}

ToolText ToolCallExtractor::flush() {
  ToolText out;
  switch (mode_) {
    case Mode::Text:
      out.content = held_;
      break;
    case Mode::Header:
    case Mode::Block:
      out.content = std::string(kOpen) + held_;  // an unclosed block that never named a call is text
      break;
    case Mode::Arguments:
    case Mode::StringArguments:
      emit(out, {count_ - 1, "", "", held_});  // the reply ended mid-arguments: they stay as generated
      break;
    case Mode::AfterArguments:
      break;
  }
  held_.clear();
  mode_ = Mode::Text;
  return out;
}

}  // namespace ds::server

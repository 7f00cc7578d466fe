#include "server/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace ds::server {

namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";

size_t partial_tag(std::string_view text, std::string_view tag) {
  for (size_t len = std::min(text.size(), tag.size() - 1); len > 0; --len)
    if (text.substr(text.size() - len) == tag.substr(0, len)) return len;
  return 0;
}

bool parse_call(std::string_view body, int index, ToolCall& call) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  call.name = j["name"].get<std::string>();
  nlohmann::ordered_json args = j.value("arguments", nlohmann::ordered_json::object());
  call.arguments = args.is_string() ? args.get<std::string>()
                                    : args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  call.index = index;
  call.id = fmt::format("call_{}", index);
  return true;
}

}  // namespace

ToolText ToolCallExtractor::push(std::string_view text) {
  ToolText out;
  if (!enabled_) {
    out.content = text;
    return out;
  }
  held_ += text;
  for (;;) {
    if (!in_call_) {
      size_t open = held_.find(kOpen);
      if (open == std::string::npos) {
        size_t keep = partial_tag(held_, kOpen);
        out.content += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      out.content += held_.substr(0, open);
      held_.erase(0, open + kOpen.size());
      in_call_ = true;
    }
    size_t close = held_.find(kClose);
    if (close == std::string::npos) return out;
    ToolCall call;
    if (parse_call(std::string_view(held_).substr(0, close), count_, call)) {
      out.calls.push_back(std::move(call));
      ++count_;
    } else {
      out.content += std::string(kOpen) + held_.substr(0, close + kClose.size());
    }
    held_.erase(0, close + kClose.size());
    in_call_ = false;
  }
}

ToolText ToolCallExtractor::flush() {
  ToolText out;
  if (in_call_) out.content += kOpen;  // an unclosed block was never a call
  out.content += held_;
  held_.clear();
  in_call_ = false;
  return out;
}

}  // namespace ds::server

#include "server/reasoning_split.h"

#include <algorithm>

#include "server/stop_strings.h"

namespace ds::server {

namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

}  // namespace

ReasoningSplitter::ReasoningSplitter(bool enabled, bool starts_in_reasoning)
    : state_(!enabled              ? State::Content
             : starts_in_reasoning ? State::Reasoning
                                   : State::Start) {
  at_section_start_ = enabled;
}

SplitText ReasoningSplitter::push(std::string_view text) {
  held_ += text;
  return drain(false);
}

SplitText ReasoningSplitter::flush() {
  return drain(true);
}

SplitText ReasoningSplitter::drain(bool final) {
  SplitText out;
  for (;;) {
    if (at_section_start_) {
      size_t skip = held_.find_first_not_of('\n');
      held_.erase(0, skip == std::string::npos ? held_.size() : skip);
      if (held_.empty()) return out;
      at_section_start_ = false;
    }
    if (state_ == State::Start) {
      // The reply may open with <think> itself (templates that do not put it in the prompt).
      if (held_.starts_with(kOpen)) {
        held_.erase(0, kOpen.size());
        state_ = State::Reasoning;
        at_section_start_ = true;
        continue;
      }
      if (!final && kOpen.starts_with(held_)) return out;
      state_ = State::Content;
    }
    if (state_ == State::Reasoning) {
      size_t close = held_.find(kClose);
      if (close != std::string::npos) {
        std::string_view before = std::string_view(held_).substr(0, close);
        size_t end = before.find_last_not_of('\n');
        out.reasoning += before.substr(0, end == std::string_view::npos ? 0 : end + 1);
        held_.erase(0, close + kClose.size());
        state_ = State::Content;
        at_section_start_ = true;
        continue;
      }
      if (final) {
        out.reasoning += held_;
        held_.clear();
        return out;
      }
      // Hold back a possible start of </think>, and trailing newlines that may precede it.
      size_t keep = partial_tag(held_, kClose);
      size_t end = held_.size() - keep;
      while (end > 0 && held_[end - 1] == '\n') --end;
      out.reasoning += held_.substr(0, end);
      held_.erase(0, end);
      return out;
    }
    out.content += held_;
    held_.clear();
    return out;
  }
}

bool prompt_opens_reasoning(std::string_view prompt) {
  size_t end = prompt.find_last_not_of(" \t\r\n");
  return end != std::string_view::npos && prompt.substr(0, end + 1).ends_with(kOpen);
}

}  // namespace ds::server

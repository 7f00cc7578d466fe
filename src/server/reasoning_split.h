#pragma once
// Splits a thinking model's reply into reasoning_content (inside <think>...</think>) and content, as text
// streams in. A template that opens <think> in the prompt makes the reply start inside the reasoning.
#include <string>
#include <string_view>

namespace ds::server {

struct SplitText {
  std::string reasoning, content;
};

class ReasoningSplitter {
 public:
  // disabled: everything is content. starts_in_reasoning: the prompt ended inside an open <think>.
  ReasoningSplitter(bool enabled, bool starts_in_reasoning);

  SplitText push(std::string_view text);
  SplitText flush();  // the reply ended, possibly mid-thought
  bool in_reasoning() const { return state_ == State::Reasoning; }

 private:
  enum class State { Start, Reasoning, Content };
  SplitText drain(bool final);

  State state_;
  std::string held_;
  bool at_section_start_ = true;  // newlines right after <think> or </think> are layout, not text
};

// Whether a rendered prompt ends with an opened <think> (trailing whitespace allowed).
bool prompt_opens_reasoning(std::string_view prompt);

}  // namespace ds::server

#pragma once
// Stop strings over streamed text: text that could still be the start of a stop string is held back, so a
// stop string split across tokens is never sent.
#include <string>
#include <string_view>
#include <vector>

namespace ds::server {

// Length of the longest suffix of `text` that is a proper prefix of `tag`: how much streamed text must be
// held back because the next token could complete `tag` (stop strings, <think> and <tool_call> tags).
size_t partial_tag(std::string_view text, std::string_view tag);

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);

  // Appends text and returns what can be sent now. Once a stop string matched, returns the text before it and
  // then "" forever; the stop string itself is never sent.
  std::string push(std::string_view text);
  // The reply ended: the held-back text is no stop string, so it is sent.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace ds::server

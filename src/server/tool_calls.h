#pragma once
// Hermes / Qwen style tool calls in reply text: <tool_call>{"name": ..., "arguments": {...}}</tool_call>.
#include <string>
#include <string_view>
#include <vector>

namespace ds::server {

struct ToolCall {
  int index = 0;                    // position among the reply's calls
  std::string id, name, arguments;  // arguments: a JSON text, as the OpenAI API carries it
};

struct ToolText {
  std::string content;
  std::vector<ToolCall> calls;  // calls completed by this piece
};

// Takes content text as it streams; text inside a <tool_call> block is held until the block closes and then
// comes out as a call. A block that is not a valid call is given back as content.
class ToolCallExtractor {
 public:
  explicit ToolCallExtractor(bool enabled) : enabled_(enabled) {}
  ToolText push(std::string_view text);
  ToolText flush();
  int calls() const { return count_; }

 private:
  bool enabled_;
  bool in_call_ = false;
  std::string held_;
  int count_ = 0;
};

}  // namespace ds::server

#pragma once
// Hermes / Qwen style tool calls in reply text: <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
// given out as OpenAI's streamed tool-call deltas.
#include <string>
#include <string_view>
#include <vector>

namespace ds::server {

// One piece of a tool call. The first piece of a call carries its id and name; later ones (id empty) carry
// only more of the arguments' JSON text. Concatenating the pieces of an index gives the whole call.
struct ToolCall {
  int index = 0;                    // position among the reply's calls
  std::string id, name, arguments;  // arguments: a JSON text, as the OpenAI API carries it
};

struct ToolText {
  std::string content;
  std::vector<ToolCall> calls;  // call pieces this text completed, in order
  int closed = 0;               // calls whose </tool_call> arrived in this text
};

// Takes content text as it streams. A call whose body opens with {"name": "...", "arguments": is given out as
// soon as its name is known, then its arguments as they arrive (a string value is decoded once it ends);
// other bodies are held until </tool_call> and given out whole if they parse, else given back as content.
class ToolCallExtractor {
 public:
  explicit ToolCallExtractor(bool enabled) : enabled_(enabled) {}
  ToolText push(std::string_view text);
  ToolText flush();  // the reply ended: an unfinished call keeps what it has, an undecided block is content
  int calls() const { return count_; }

 private:
  enum class Mode { Text, Header, Arguments, StringArguments, AfterArguments, Block };
  // Each step consumes from held_ and returns false when it needs more text.
  bool step_text(ToolText& out);
  bool step_header(ToolText& out);
  bool step_arguments(ToolText& out);
  bool step_string_arguments(ToolText& out);
  bool step_to_close(ToolText& out);
  void end_call(ToolText& out);
  void emit(ToolText& out, ToolCall piece);

  bool enabled_;
  Mode mode_ = Mode::Text;
  std::string held_;
  int count_ = 0;
  // Arguments being streamed: JSON nesting depth, and whether the scan is inside a string.
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false;
};

}  // namespace ds::server

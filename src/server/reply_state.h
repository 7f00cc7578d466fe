#pragma once
// One reply as its tokens arrive: stop strings, then the reasoning split, then tool calls; counts and the
// token hash for the usage and extension blocks.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/token_logprobs.h"
#include "server/reasoning_split.h"
#include "server/stop_strings.h"
#include "server/tool_calls.h"

namespace ds::server {

struct LogprobEntry {
  int32_t id;
  float logprob;
  std::vector<TokenLogprob> top;
};

// What one step adds to the reply; streaming sends it as one chunk when it is not empty.
struct ReplyDelta {
  std::string reasoning, content;
  std::vector<ToolCall> tool_calls;
  std::vector<LogprobEntry> logprobs;
  bool empty() const {
    return reasoning.empty() && content.empty() && tool_calls.empty() && logprobs.empty();
  }
};

struct ReplyConfig {
  std::vector<std::string> stop;
  bool reasoning = false;            // the template thinks: split <think> blocks out
  bool starts_in_reasoning = false;  // the prompt ended with an open <think>
  bool tools = false;                // the request offered tools: parse <tool_call> blocks
  bool single_call = false;          // parallel_tool_calls false: the reply ends after its first call
  std::string prefill;               // text the prompt already holds of the reply (a forced call's opening)
};

class ReplyState {
 public:
  explicit ReplyState(const ReplyConfig& config);

  // A generated token and the text it completes ("" for tokens that show nothing). Ignored once stopped.
  ReplyDelta push(int32_t token, std::string_view text, const std::optional<LogprobReport>& logprobs);
  // The reply ended: `tail` (the decoder's last bytes) and held-back text come out.
  ReplyDelta finish(std::string_view tail = {});
  // A stop string matched, or the one allowed tool call closed: cancel the engine request and finish.
  bool stopped() const { return stop_.stopped() || call_done_; }

  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t reasoning_tokens() const { return reasoning_tokens_; }
  // The whole reply so far (tool calls whole, their pieces joined), for non-streaming responses.
  const ReplyDelta& total() const { return total_; }
  // FNV-1a 64 over the token ids (little-endian int32), 16 hex digits: compares replies cheaply.
  std::string token_hash() const;

 private:
  ReplyDelta route(std::string text, bool final);

  bool single_call_;
  bool call_done_ = false;
  std::vector<ToolCall> pending_calls_;  // the prefill's call opening, sent with the first delta
  StopStringFilter stop_;
  ReasoningSplitter split_;
  ToolCallExtractor tools_;
  std::vector<int32_t> tokens_;
  int64_t reasoning_tokens_ = 0;
  ReplyDelta total_;
};

}  // namespace ds::server

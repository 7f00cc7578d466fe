#include "server/reply_state.h"

#include <fmt/format.h>

#include <algorithm>

namespace ds::server {

namespace {

// Pieces of the same call are joined: consecutive ones in a delta, all of them in the whole reply.
void add_pieces(std::vector<ToolCall>& into, const std::vector<ToolCall>& pieces, bool whole) {
  for (const ToolCall& piece : pieces) {
    auto same =
        std::find_if(into.begin(), into.end(), [&](const ToolCall& c) { return c.index == piece.index; });
    if (same != into.end() && (whole || same + 1 == into.end()) && piece.id.empty())
      same->arguments += piece.arguments;
    else
      into.push_back(piece);
  }
}

}  // namespace

ReplyState::ReplyState(const ReplyConfig& config)
    : single_call_(config.single_call),
      stop_(config.stop),
      split_(config.reasoning, config.starts_in_reasoning),
      tools_(config.tools) {
  // The prompt ends inside the reply's first call: its opening is parsed as if generated, and only the call
  // it names comes out.
  if (!config.prefill.empty()) pending_calls_ = tools_.push(config.prefill).calls;
}

ReplyDelta ReplyState::route(std::string text, bool final) {
  ReplyDelta d;
  SplitText split = split_.push(text);
  if (final) {
    SplitText rest = split_.flush();
    split.reasoning += rest.reasoning;
    split.content += rest.content;
  }
  d.reasoning = std::move(split.reasoning);
  ToolText tool = tools_.push(split.content);
  if (final) {
    ToolText rest = tools_.flush();
    tool.content += rest.content;
  }
  d.content = std::move(tool.content);
  add_pieces(d.tool_calls, pending_calls_, false);
  pending_calls_.clear();
  for (ToolCall& piece : tool.calls)
    if (!single_call_ || piece.index == 0) add_pieces(d.tool_calls, {std::move(piece)}, false);
  if (single_call_ && tool.closed > 0) call_done_ = true;
  total_.reasoning += d.reasoning;
  total_.content += d.content;
  add_pieces(total_.tool_calls, d.tool_calls, true);
  return d;
}

ReplyDelta ReplyState::push(int32_t token, std::string_view text,
                            const std::optional<LogprobReport>& logprobs) {
  if (stopped()) return {};
  tokens_.push_back(token);
  bool was_reasoning = split_.in_reasoning();
  ReplyDelta d = route(stop_.push(text), false);
  if (was_reasoning || split_.in_reasoning()) ++reasoning_tokens_;
  if (logprobs) {
    d.logprobs.push_back({token, logprobs->chosen, logprobs->top});
    total_.logprobs.push_back(d.logprobs.back());
  }
  return d;
}

ReplyDelta ReplyState::finish(std::string_view tail) {
  if (call_done_) return {};  // the one allowed call closed: what followed it is not part of the reply
  std::string text = stop_.push(tail);
  return route(text + stop_.flush(), true);
}

std::string ReplyState::token_hash() const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t t : tokens_) {
    uint32_t u = static_cast<uint32_t>(t);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return fmt::format("{:016x}", h);
}

}  // namespace ds::server

#pragma once
// OpenAI response objects: chat.completion, text_completion, their streaming chunks and SSE framing.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_request.h"
#include "server/reply_state.h"

namespace ds::server {

using Json = nlohmann::ordered_json;
// A token's raw bytes, for logprob entries (invalid UTF-8 becomes U+FFFD when serialised).
using TokenText = std::function<std::string(int32_t)>;

struct ResponseMeta {
  Endpoint endpoint = Endpoint::Chat;
  std::string id, model;
  int64_t created = 0;
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0, reasoning_tokens = 0;
};

// The "extension" block: what the engine did, so clients can check replay and exactness.
struct Extension {
  uint64_t seed = 0;
  int64_t drafted = 0, accepted = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  std::string token_hash;
  const std::vector<int32_t>* token_ids = nullptr;  // listed when the request asked (return_token_ids)
};

Json usage_json(const Usage& usage);
Json extension_json(const Extension& extension);

// Logprobs as each endpoint spells them; text_offset carries the completions offsets across chunks.
Json logprobs_json(Endpoint endpoint, const std::vector<LogprobEntry>& entries, const TokenText& text,
                   size_t& text_offset);

// A streaming chunk for one delta; finish_reason empty means null. role: chat's first chunk names the role.
Json chunk_json(const ResponseMeta& meta, const ReplyDelta& delta, bool with_logprobs,
                const std::string& finish, bool role, const TokenText& text, size_t& text_offset);
// The final usage chunk of a stream (stream_options.include_usage): no choices.
Json usage_chunk_json(const ResponseMeta& meta, const Usage& usage, const Extension& extension);

// The whole non-streaming response.
Json response_json(const ResponseMeta& meta, const ReplyDelta& reply, bool with_logprobs,
                   const std::string& finish, const Usage& usage, const Extension& extension,
                   const TokenText& text, const std::string& echo_prefix);

// "data: {json}\n\n"; invalid UTF-8 in strings becomes U+FFFD.
std::string sse_data(const Json& json);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";
std::string dump_json(const Json& json);

}  // namespace ds::server

#pragma once
// Chat messages as clients send them -> the shape chat templates expect.
#include "server/request_fields.h"

namespace ds::server {

// Checks roles and content; joins text parts with "\n" (vLLM's "string" content format); gives tool-call
// messages "" rather than null content and parses string tool arguments into objects, as templates expect.
Json normalize_messages(const Json& messages);

// The tools list as given (each {"type": "function", "function": {"name", ...}}), checked; null when absent.
Json normalize_tools(const Json* tools);

}  // namespace ds::server

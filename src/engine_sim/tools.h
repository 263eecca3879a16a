// Tool calling in the engine simulator: which function a request's `tools`
// and `tool_choice` make it call, and the call it answers with, so the
// gateway's and clients' tool paths are tested without a GPU. Pure.
//
// The rule (deterministic, so tests can aim it):
//   tool_choice "none"                    text, never a call;
//   "auto" (the default with tools)       a call of the first tool whose name
//                                         appears in the last message when
//                                         that is the user's, else text (so a
//                                         tool's result gets a text answer);
//   "required"                            that tool, else the first one;
//   a named function                      that one (unknown: 400).
// A "required" or named choice without tools is refused (400), as vLLM does.
// The arguments are a JSON object built from the function's `parameters`
// schema: every property, in name order — a string gets a word of the
// simulator's, an integer or number 7, a boolean true, an enum its first
// value, an array [], an object {} — so a client's JSON parser accepts them.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/json_reader.h"
#include "common/result.h"

namespace atrium::engine_sim {

struct ToolCall {
  std::string call_id;  // "call_<16 hex>"
  std::string name;
  std::string arguments;  // JSON text
};

// `body`'s tools and tool_choice, in chat's shape ({"type":"function",
// "function":{"name",...}}) or, with `responses`, the Responses API's
// ({"type":"function","name",...}). Tools of other types (web search ...)
// are never called. kInvalidArgument naming the field for malformed ones.
// `last_user_text`: the last message's text when it is the user's, else "".
Result<std::optional<ToolCall>> DecideToolCall(const Json& body, bool responses,
                                               std::string_view last_user_text, uint64_t text_hash);

// The call is generated 4 bytes of its arguments a token.
int ToolCallTokens(const ToolCall& call);
// Token `index`'s piece of the arguments ("" past their end).
std::string_view ArgumentsPiece(const ToolCall& call, int index);
// The arguments as far as `tokens` tokens got (all of them when it ran out).
std::string_view ArgumentsAfter(const ToolCall& call, int tokens);

}  // namespace atrium::engine_sim

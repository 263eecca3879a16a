// The few interactions with a person at a terminal: hidden password entry
// and confirmation prompts. Prompts go to stderr so stdout stays data.
#pragma once

#include <string>

#include "common/result.h"

namespace atrium::cli {

// True when stdin is a terminal (a person could answer a prompt).
bool IsInteractive();

// Prints `prompt` on stderr and reads one line from stdin with echo off.
// Errors: kFailedPrecondition at end of input.
Result<std::string> ReadSecret(const std::string& prompt);
// Prints `prompt` on stderr and reads one echoed line from stdin.
Result<std::string> ReadLine(const std::string& prompt);
// Everything on stdin up to EOF, without trailing "\n" / "\r\n" (for
// --password-stdin). Errors: kInvalidArgument when it is empty.
Result<std::string> ReadStdinSecret();

}  // namespace atrium::cli

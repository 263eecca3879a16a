// `atrium engine-sim`: runs the engine simulator (server.h) from the command
// line until SIGINT or SIGTERM. The command's shell: flags in, one line out.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <utility>

#include "common/result.h"
#include "engine_sim/server.h"

namespace CLI {
class App;
}  // namespace CLI

namespace atrium::engine_sim {

// Adds the subcommand `engine-sim` to `app`. When it is selected, its
// callback (run by app.parse()) serves until SIGINT or SIGTERM and then ends
// the parse by throwing CLI::Success, so the caller's usual
// `catch (const CLI::ParseError& e) { return app.exit(e); }` exits 0; when
// the server cannot start it prints why and throws CLI::RuntimeError(1).
// Flags: --listen HOST:PORT (127.0.0.1:8000), --model, --profile,
// --max-batch, --threads, --default-max-tokens, --max-natural-length, --seed.
void RegisterEngineSimCommand(CLI::App& app);

// "HOST:PORT" or "[IPV6]:PORT" (port 0: any free port). kInvalidArgument otherwise.
Result<std::pair<std::string, int>> ParseListen(std::string_view listen);

// The command's body: starts a server with `options`, prints
// "engine-sim (simulator) listening on http://HOST:PORT model=... profile=..."
// to `out` (flushed), calls wait_for_stop(), stops. Returns the exit status:
// 0, or 1 (the reason on `err`) when the server cannot start.
int RunEngineSim(const ServerOptions& options, std::ostream& out, std::ostream& err,
                 const std::function<void()>& wait_for_stop);

}  // namespace atrium::engine_sim

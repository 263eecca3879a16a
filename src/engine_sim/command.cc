#include "engine_sim/command.h"

#include <signal.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <iostream>
#include <ostream>
#include <vector>

namespace atrium::engine_sim {
namespace {

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

std::string UrlHost(const std::string& host) {
  if (host.find(':') != std::string::npos && host.front() != '[') return "[" + host + "]";
  return host;
}

}  // namespace

Result<std::pair<std::string, int>> ParseListen(std::string_view listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Error::InvalidArgument("listen address must be HOST:PORT, got '" + std::string(listen) +
                                  "'");
  }
  std::string host(listen.substr(0, colon));
  const std::string_view port_text = listen.substr(colon + 1);
  if (host.find(':') != std::string::npos && (host.front() != '[' || host.back() != ']')) {
    return Error::InvalidArgument("an IPv6 listen address must be written [ADDRESS]:PORT");
  }
  int port = -1;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 0 || port > 65535) {
    return Error::InvalidArgument("listen port must be 0-65535, got '" + std::string(port_text) +
                                  "'");
  }
  return std::make_pair(std::move(host), port);
}

int RunEngineSim(const ServerOptions& options, std::ostream& out, std::ostream& err,
                 const std::function<void()>& wait_for_stop) {
  Server server(options);
  auto port = server.Start();
  if (!port.has_value()) {
    err << "atrium engine-sim (simulator): cannot start: " << port.error().message << std::endl;
    return 1;
  }
  std::string models;
  for (const std::string& m : server.models()) models += (models.empty() ? "" : ",") + m;
  out << "engine-sim (simulator) listening on http://" << UrlHost(options.host) << ":" << *port
      << " model=" << models << " profile=" << server.profile().name << std::endl;
  wait_for_stop();
  err << "engine-sim (simulator): stopping" << std::endl;
  server.Stop();
  return 0;
}

void RegisterEngineSimCommand(CLI::App& app) {
  // The options live as long as the app's callbacks can run: the process.
  struct Flags {
    std::string listen = "127.0.0.1:8000";
    ServerOptions server;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* command =
      app.add_subcommand("engine-sim", "OpenAI-compatible model server simulator (no GPU)");
  command->add_option("--listen", flags->listen, "Listen address HOST:PORT (port 0: any free)")
      ->capture_default_str()
      ->check([](const std::string& value) {
        auto parsed = ParseListen(value);
        return parsed.has_value() ? std::string() : parsed.error().message;
      });
  command
      ->add_option("--model", flags->server.model,
                   "Served model name (comma-separated: several names for one engine)")
      ->capture_default_str();
  std::vector<std::string> profiles;
  for (const Profile& p : BuiltinProfiles()) profiles.push_back(p.name);
  command
      ->add_option("--profile", flags->server.profile,
                   "Simulated GPU and model (instant: no delays at all; slow: one token per "
                   "second per stream)")
      ->capture_default_str()
      ->check(CLI::IsMember(profiles));
  command
      ->add_option("--max-batch", flags->server.max_batch,
                   "Requests decoded together (0: the profile's; instant has no batch)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  command->add_option("--threads", flags->server.threads, "I/O threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  command
      ->add_option("--default-max-tokens", flags->server.default_max_tokens,
                   "Completion tokens when a request sets no max_tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  command
      ->add_option("--max-natural-length", flags->server.max_natural_length,
                   "If > 0, each prompt also stops (finish_reason \"stop\") at a deterministic "
                   "length in [1, N]; 0: every request runs to its max_tokens")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  command->add_option("--seed", flags->server.seed, "Changes every completion text and embedding")
      ->capture_default_str();
  command->add_flag("--enable-lora", flags->server.enable_lora,
                    "Serve LoRA adapters loaded while it runs (POST /v1/load_lora_adapter)");
  command->callback([flags] {
    // main() blocks these before any thread starts; blocking them again here
    // keeps sigwait well-defined if it did not, and the server's threads
    // inherit the mask.
    const sigset_t stop_signals = StopSignals();
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    auto listen = ParseListen(flags->listen);  // checked at parse time already
    if (!listen.has_value()) throw CLI::ValidationError("--listen", listen.error().message);
    ServerOptions options = flags->server;
    options.host = listen->first;
    options.port = listen->second;
    const int rc = RunEngineSim(options, std::cout, std::cerr, [&stop_signals] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
    });
    if (rc != 0) throw CLI::RuntimeError(rc);
    throw CLI::Success();
  });
}

}  // namespace atrium::engine_sim

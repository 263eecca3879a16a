// How a relayed exchange ends: the pure outcome table of the relay stages
// (src/gateway_server/stage_relay_stream.cc, stage_relay_whole.cc). Given
// what is known when the upstream's answer has been read (or has stopped),
// it says what the usage record says, what the client is sent, and what the
// dispatcher is told about the endpoint. No I/O: the stages do what it says.
#pragma once

#include <cstdint>
#include <optional>

#include "gateway/usage_meter.h"

namespace atrium::gateway {

enum class ClientState {
  kConnected,
  kGone,  // its socket closed (the watch saw it) or a write to it failed
};

enum class UpstreamState {
  kIntact,    // no read failed: the answer was read to its end, or (a
              // stream) its reading stopped because the client had gone
  kBrokeOff,  // the read failed: a reset, a silence past the idle timeout, a
              // malformed or oversized body, or Stop() closing it
  kTimedOut,  // a whole (not streamed) body not read by its deadline; a
              // stream has no such deadline, and is taken as kBrokeOff
};

struct RelayFacts {
  bool streaming = false;  // relayed event by event (its 200 head is sent already)
  ClientState client = ClientState::kConnected;
  UpstreamState upstream = UpstreamState::kIntact;
  bool shutting_down = false;  // Stop() cut the exchange after its drain time
  int upstream_status = 200;   // the answer's status (a stream's is 200)
  // A stream's record was written when its [DONE] passed (the client may
  // take [DONE] as the end: the record is durable first).
  bool recorded_at_done = false;
};

// What the client receives after the relay.
enum class Reply {
  kNothing,         // nothing more, and the connection closes: the client has
                    // gone, or a broken stream must be seen to break, not end
  kStreamEnd,       // a stream's last events and its terminating chunk
  kUpstreamAnswer,  // the whole answer, with the server's status
  kShuttingDown,    // Refusal::ShuttingDown(), and the connection closes
  kBodyTimeout,     // Refusal::UpstreamBodyTimeout()
  kBrokeOff,        // Refusal::UpstreamBrokeOff()
};

// The dispatcher's verdict on the endpoint (Dispatcher::Outcome).
enum class EndpointVerdict {
  kSucceeded,
  kFailed,
  kAbandoned,  // no verdict: the client left, or the gateway's own stop
};

struct RelayOutcome {
  // The record's status and HTTP status; none when it was written already
  // (recorded_at_done).
  std::optional<UsageStatus> usage;
  int record_status = 0;
  Reply reply = Reply::kNothing;
  int reply_status = 0;  // the status of a response still to begin (0: none)
  EndpointVerdict verdict = EndpointVerdict::kSucceeded;

  friend bool operator==(const RelayOutcome&, const RelayOutcome&) = default;
};

RelayOutcome RelayOutcomeOf(const RelayFacts& facts);

}  // namespace atrium::gateway

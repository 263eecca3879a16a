#include "gateway/limiter.h"

#include <algorithm>

namespace atrium::gateway {

namespace {

// Bucket units per request or token (= milliseconds per minute).
constexpr int64_t kUnits = 60000;
// Larger limits and counts act as this; keeps units far from overflow.
constexpr int64_t kMaxPerMinute = int64_t{1} << 40;
constexpr int64_t kMaxUnits = kMaxPerMinute * kUnits;
// A full queue drains as requests start; the client learns no more precise
// time from the counts alone.
constexpr int64_t kQueueFullRetryMs = 1000;

int64_t Clamp(int64_t n) { return std::clamp<int64_t>(n, 0, kMaxPerMinute); }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// "key:abc" → "key abc", for messages.
std::string Who(const std::string& subject) {
  std::string who = subject;
  if (size_t colon = who.find(':'); colon != std::string::npos) who[colon] = ' ';
  return who;
}

}  // namespace

void Limiter::Bucket::Refill(int64_t per_minute, int64_t now_ms) {
  int64_t capacity = per_minute * kUnits;
  if (!started) {
    *this = {capacity, now_ms, true};
    return;
  }
  if (now_ms > updated_ms) {
    int64_t missing = capacity - level;
    if (missing > 0) {
      int64_t elapsed = now_ms - updated_ms;
      level = elapsed >= CeilDiv(missing, per_minute) ? capacity : level + elapsed * per_minute;
    }
    updated_ms = now_ms;
  }
  level = std::min(level, capacity);
}

bool Limiter::Bucket::FullAt(int64_t per_minute, int64_t now_ms) const {
  if (per_minute <= 0 || !started) return true;
  int64_t missing = per_minute * kUnits - level;
  return missing <= 0 || now_ms - updated_ms >= CeilDiv(missing, per_minute);
}

LimitDecision Limiter::Admit(const std::vector<LimitSubject>& subjects, int64_t tokens,
                             int64_t now_ms) {
  tokens = Clamp(tokens);
  LimitDecision refused{false, 0, ""};
  bool refuse = false;
  // The answer names the limit that waits longest; one that can never be met wins.
  auto wait = [&](int64_t retry_after_ms, std::string reason) {
    bool longer = refused.retry_after_ms != -1 &&
                  (retry_after_ms == -1 || retry_after_ms > refused.retry_after_ms);
    if (!refuse || longer) refused = {false, retry_after_ms, std::move(reason)};
    refuse = true;
  };
  std::vector<State*> states;
  states.reserve(subjects.size());
  for (const LimitSubject& subject : subjects) {
    State& state = subjects_[subject.name];
    state.limits = subject.limits;
    states.push_back(&state);
    int64_t rpm = Clamp(subject.limits.requests_per_minute);
    int64_t tpm = Clamp(subject.limits.tokens_per_minute);
    if (rpm > 0) {
      state.requests.Refill(rpm, now_ms);
      if (state.requests.level < kUnits) {
        wait(
            CeilDiv(kUnits - state.requests.level, rpm),
            "requests per minute of " + Who(subject.name) + " (limit " + std::to_string(rpm) + ")");
      }
    }
    if (tpm > 0 && tokens > tpm) {
      wait(-1, "tokens per minute of " + Who(subject.name) + ": the request needs " +
                   std::to_string(tokens) + " tokens, more than the limit of " +
                   std::to_string(tpm));
    } else if (tpm > 0 && tokens > 0) {
      state.tokens.Refill(tpm, now_ms);
      if (state.tokens.level < tokens * kUnits) {
        wait(CeilDiv(tokens * kUnits - state.tokens.level, tpm),
             "tokens per minute of " + Who(subject.name) + " (limit " + std::to_string(tpm) + ")");
      }
    }
  }
  if (refuse) return refused;
  for (size_t i = 0; i < subjects.size(); ++i) {
    if (Clamp(subjects[i].limits.requests_per_minute) > 0) states[i]->requests.level -= kUnits;
    if (Clamp(subjects[i].limits.tokens_per_minute) > 0) {
      states[i]->tokens.level -= tokens * kUnits;
    }
  }
  return {};
}

void Limiter::Reconcile(const std::vector<LimitSubject>& subjects, int64_t reserved, int64_t actual,
                        int64_t now_ms) {
  int64_t give_back = Clamp(reserved) - Clamp(actual);
  for (const LimitSubject& subject : subjects) {
    int64_t tpm = Clamp(subject.limits.tokens_per_minute);
    if (tpm == 0) continue;
    State& state = subjects_[subject.name];
    state.limits = subject.limits;
    state.tokens.Refill(tpm, now_ms);
    // One request's excess takes at most one minute of the limit: a usage
    // report far above what was reserved (a lying or broken model server)
    // delays the subject's next requests by a minute, not by hours.
    const int64_t change = std::max(give_back, -tpm);
    state.tokens.level = std::clamp(state.tokens.level + change * kUnits, -kMaxUnits, tpm * kUnits);
  }
}

bool Limiter::CanStart(const std::vector<LimitSubject>& subjects) const {
  for (const LimitSubject& subject : subjects) {
    if (subject.limits.max_concurrent <= 0) continue;
    auto it = subjects_.find(subject.name);
    if (it != subjects_.end() && it->second.in_flight >= subject.limits.max_concurrent) {
      return false;
    }
  }
  return true;
}

void Limiter::Started(const std::vector<LimitSubject>& subjects) {
  for (const LimitSubject& subject : subjects) {
    State& state = subjects_[subject.name];
    state.limits = subject.limits;
    ++state.in_flight;
  }
}

void Limiter::Finished(const std::vector<LimitSubject>& subjects) {
  for (const LimitSubject& subject : subjects) {
    auto it = subjects_.find(subject.name);
    if (it != subjects_.end() && it->second.in_flight > 0) --it->second.in_flight;
  }
}

LimitDecision Limiter::TryQueue(const std::vector<LimitSubject>& subjects) {
  for (const LimitSubject& subject : subjects) {
    if (subject.limits.max_queued <= 0) continue;
    auto it = subjects_.find(subject.name);
    if (it != subjects_.end() && it->second.queued >= subject.limits.max_queued) {
      return {false, kQueueFullRetryMs,
              "queued requests of " + Who(subject.name) + " (limit " +
                  std::to_string(subject.limits.max_queued) + ")"};
    }
  }
  for (const LimitSubject& subject : subjects) {
    State& state = subjects_[subject.name];
    state.limits = subject.limits;
    ++state.queued;
  }
  return {};
}

void Limiter::Unqueued(const std::vector<LimitSubject>& subjects) {
  for (const LimitSubject& subject : subjects) {
    auto it = subjects_.find(subject.name);
    if (it != subjects_.end() && it->second.queued > 0) --it->second.queued;
  }
}

void Limiter::Sweep(int64_t now_ms) {
  std::erase_if(subjects_, [&](const auto& entry) {
    const State& s = entry.second;
    return s.in_flight == 0 && s.queued == 0 &&
           s.requests.FullAt(Clamp(s.limits.requests_per_minute), now_ms) &&
           s.tokens.FullAt(Clamp(s.limits.tokens_per_minute), now_ms);
  });
}

}  // namespace atrium::gateway

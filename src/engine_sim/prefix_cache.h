// The engine simulator's prefix cache: what vLLM's automatic prefix caching
// does, at the granularity the simulator sees. A prompt is a chain of
// blocks of kPrefixBlockTokens tokens (vLLM's default block size), each
// named by a hash of everything before it and of the request's
// `cache_salt` (PrefixBlocks), so two prompts share cached blocks only
// where they begin alike *and* carry the same salt: a tenant's prompt never
// hits another tenant's cache when the gateway salts each tenant apart.
// Pure: no I/O, no clock, no locking (the server holds its lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace atrium::engine_sim {

inline constexpr int64_t kPrefixBlockTokens = 16;
// The simulator counts ~4 bytes of text a token (CountTextTokens).
inline constexpr size_t kPrefixBlockBytes = 4 * kPrefixBlockTokens;

// The names of the complete blocks of `prompt` (the prompt's bytes as the
// simulator serializes them), each a hash chained from `salt` through
// every earlier block. A tail shorter than a block is never cached.
std::vector<uint64_t> PrefixBlocks(std::string_view salt, std::string_view prompt);

// A least-recently-used set of block names, at most `capacity_blocks`.
class PrefixCache {
 public:
  explicit PrefixCache(size_t capacity_blocks);

  // How many of `blocks`, from the first, were cached (the prefix a real
  // engine would not compute again); then every block of `blocks` is cached
  // as the most recently used.
  size_t LookupAndInsert(const std::vector<uint64_t>& blocks);

  size_t size() const { return order_.size(); }

 private:
  void Touch(uint64_t block);

  size_t capacity_;
  std::list<uint64_t> order_;  // most recent first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where_;
};

// The tokens of a `prompt_tokens` prompt served from `cached_blocks`
// blocks: never the whole prompt (an engine always computes its last
// token, vLLM included).
int64_t CachedTokens(size_t cached_blocks, int64_t prompt_tokens);

}  // namespace atrium::engine_sim

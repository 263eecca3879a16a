#include "engine_sim/prefix_cache.h"

#include <algorithm>

#include "crypto/crypto.h"

namespace atrium::engine_sim {
namespace {

uint64_t First8(const std::string& digest) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8 && i < digest.size(); ++i) {
    v = (v << 8) | static_cast<unsigned char>(digest[i]);
  }
  return v;
}

}  // namespace

std::vector<uint64_t> PrefixBlocks(std::string_view salt, std::string_view prompt) {
  std::vector<uint64_t> blocks;
  blocks.reserve(prompt.size() / kPrefixBlockBytes);
  // The chain starts from the salt: the same text under two salts shares
  // no block name.
  std::string link = "atrium-engine-sim/prefix\n";
  link.append(salt);
  std::string chain = crypto::Sha256(link);
  for (size_t at = 0; at + kPrefixBlockBytes <= prompt.size(); at += kPrefixBlockBytes) {
    link = chain;
    link.append(prompt.substr(at, kPrefixBlockBytes));
    chain = crypto::Sha256(link);
    blocks.push_back(First8(chain));
  }
  return blocks;
}

PrefixCache::PrefixCache(size_t capacity_blocks)
    : capacity_(std::max<size_t>(1, capacity_blocks)) {}

void PrefixCache::Touch(uint64_t block) {
  auto it = where_.find(block);
  if (it != where_.end()) {
    order_.splice(order_.begin(), order_, it->second);
    return;
  }
  order_.push_front(block);
  where_.emplace(block, order_.begin());
  if (order_.size() > capacity_) {
    where_.erase(order_.back());
    order_.pop_back();
  }
}

size_t PrefixCache::LookupAndInsert(const std::vector<uint64_t>& blocks) {
  size_t hits = 0;
  while (hits < blocks.size() && where_.contains(blocks[hits])) ++hits;
  for (uint64_t block : blocks) Touch(block);
  return hits;
}

int64_t CachedTokens(size_t cached_blocks, int64_t prompt_tokens) {
  if (prompt_tokens <= 1) return 0;
  const int64_t cached =
      static_cast<int64_t>(std::min<size_t>(cached_blocks, INT64_MAX / 64)) * kPrefixBlockTokens;
  return std::clamp<int64_t>(cached, 0, prompt_tokens - 1);
}

}  // namespace atrium::engine_sim

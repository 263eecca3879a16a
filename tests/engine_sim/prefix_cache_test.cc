#include "engine_sim/prefix_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace atrium::engine_sim {
namespace {

const std::string kPrompt = std::string(64, 'a') + std::string(64, 'b') + std::string(30, 'c');

TEST(PrefixCacheTest, BlocksAreWholeAndChainedFromTheSalt) {
  auto blocks = PrefixBlocks("s", kPrompt);
  ASSERT_EQ(blocks.size(), 2u);  // the 30-byte tail is no block
  EXPECT_NE(blocks[0], blocks[1]);
  EXPECT_EQ(PrefixBlocks("s", kPrompt), blocks);
  // The same text under another salt (or none) shares no block.
  for (const char* other : {"t", ""}) {
    for (uint64_t b : PrefixBlocks(other, kPrompt)) {
      EXPECT_NE(b, blocks[0]);
      EXPECT_NE(b, blocks[1]);
    }
  }
  // A block's name depends on everything before it.
  auto swapped = PrefixBlocks("s", std::string(64, 'x') + std::string(64, 'b'));
  EXPECT_NE(swapped[1], blocks[1]);
  EXPECT_TRUE(PrefixBlocks("s", "short").empty());
}

TEST(PrefixCacheTest, HitsAreTheLeadingBlocksSeenBefore) {
  PrefixCache cache(100);
  auto first = PrefixBlocks("s", kPrompt);
  EXPECT_EQ(cache.LookupAndInsert(first), 0u);
  EXPECT_EQ(cache.LookupAndInsert(first), 2u);
  // Alike for one block, then different: one block hit.
  auto fork = PrefixBlocks("s", std::string(64, 'a') + std::string(64, 'z'));
  EXPECT_EQ(cache.LookupAndInsert(fork), 1u);
  EXPECT_EQ(cache.LookupAndInsert(PrefixBlocks("other tenant", kPrompt)), 0u);
}

TEST(PrefixCacheTest, TheLeastRecentlyUsedBlocksLeaveFirst) {
  PrefixCache cache(2);
  auto a = PrefixBlocks("a", kPrompt);  // 2 blocks: fills the cache
  auto b = PrefixBlocks("b", kPrompt);
  cache.LookupAndInsert(a);
  cache.LookupAndInsert(b);  // evicts a's
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.LookupAndInsert(a), 0u);
  EXPECT_EQ(cache.LookupAndInsert(a), 2u);
}

TEST(PrefixCacheTest, CachedTokensNeverTheWholePrompt) {
  EXPECT_EQ(CachedTokens(0, 100), 0);
  EXPECT_EQ(CachedTokens(2, 100), 32);
  EXPECT_EQ(CachedTokens(2, 32), 31);  // the last token is always computed
  EXPECT_EQ(CachedTokens(5, 1), 0);
  EXPECT_EQ(CachedTokens(SIZE_MAX, 100), 99);  // no overflow on absurd counts
  EXPECT_GT(CachedTokens(SIZE_MAX, INT64_MAX), 0);
}

}  // namespace
}  // namespace atrium::engine_sim

// Padding waste and rank imbalance of the token-batching plans (runtime/data/token_batching.h)
// on a real shard folder (dptrain prepare-text): fixed batches vs fairseq max_tokens vs packing,
// with and without sort_and_deal balancing, on 1, 2 and 4 ranks. One Markdown table on stdout.
//   token_batching_bench --shards /tmp/fortune_shards [--vocab /tmp/fortune_shards/vocab.txt]
//                        [--batch-size 64] [--max-tokens 4096] [--epoch 0]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "runtime/data/token_batching.h"
#include "runtime/text/text_shards.h"
#include "runtime/text/wordpiece.h"

int main(int argc, char** argv) {
  CLI::App app{"Padding waste and rank imbalance of token batching on a shard folder", "token_batching_bench"};
  std::string shards, vocab_path;
  int64_t batch_size = 64, max_tokens = 4096, epoch = 0;
  app.add_option("--shards", shards, "A folder written by dptrain prepare-text")->required();
  app.add_option("--vocab", vocab_path, "Its vocab.txt (default: <shards>/vocab.txt)");
  app.add_option("--batch-size", batch_size, "Global rows per step for fixed batching")->check(CLI::PositiveNumber);
  app.add_option("--max-tokens", max_tokens, "Padded tokens per rank batch for max_tokens")->check(CLI::PositiveNumber);
  app.add_option("--epoch", epoch, "Which epoch's plan");
  CLI11_PARSE(app, argc, argv);
  if (vocab_path.empty()) vocab_path = (std::filesystem::path(shards) / "vocab.txt").string();
  try {
    const dp::text::Vocabulary vocab = dp::text::Vocabulary::load(vocab_path);
    const dp::text::TextDataset data = dp::text::TextDataset::open(shards, vocab);
    const std::span<const int32_t> lengths = data.lengths();
    std::printf("%zu sequences, %zu tokens, max_seq_length %d; fixed batches of %lld rows, max_tokens %lld\n\n",
                data.size(), static_cast<size_t>(data.num_tokens()), data.max_seq_length(),
                static_cast<long long>(batch_size), static_cast<long long>(max_tokens));
    std::printf("| batching | packing | ranks | balance | steps | padding waste | imbalance mean / worst | "
                "bottleneck padded tokens |\n|---|---|---:|---|---:|---:|---|---:|\n");
    for (const dp::SequencePacking packing : {dp::SequencePacking::None, dp::SequencePacking::Greedy}) {
      for (const dp::TokenBatching batching : {dp::TokenBatching::Fixed, dp::TokenBatching::MaxTokens}) {
        for (const int ranks : {1, 2, 4}) {
          for (const dp::RankBalance balance : {dp::RankBalance::None, dp::RankBalance::SortAndDeal}) {
            if (ranks == 1 && balance == dp::RankBalance::SortAndDeal) continue;
            dp::TokenBatchingOptions o;
            o.batching = batching;
            o.batch_size = batch_size;
            o.max_tokens = max_tokens;
            o.max_seq_length = data.max_seq_length();
            o.balance = balance;
            o.packing = packing;
            o.world_size = ranks;
            o.seed = 1;
            const dp::TokenEpochStats s = dp::plan_token_epoch(lengths, o, epoch).stats;
            std::printf("| %s | %s | %d | %s | %lld | %.1f %% | %.3f / %.3f | %lld |\n",
                        batching == dp::TokenBatching::Fixed ? "fixed" : "max_tokens",
                        packing == dp::SequencePacking::None ? "none" : "greedy", ranks,
                        balance == dp::RankBalance::None ? "none" : "sort_and_deal", static_cast<long long>(s.steps),
                        100.0 * s.padding_waste, s.mean_imbalance, s.worst_imbalance,
                        static_cast<long long>(s.bottleneck_padded_tokens));
          }
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "token_batching_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

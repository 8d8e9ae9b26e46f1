// dptrain side of the BERT training-step benchmark (pairs with bert_reference.py): one step =
// encoder forward on [batch, seq] token ids with a padding mask, the MLM head on the masked
// positions only (gathered, as NVIDIA's and MLPerf's BERT do), cross-entropy, backward, AdamW,
// zero_grad(set_to_none). Dropout on (training). Fixed random ids, 15 % of positions predicted;
// warmup, then median/min over --iters. JSON lines on stdout.
//   bert_step_bench [--threads 2] [--iters 10] [--warmup 3] [--only bert_mini]
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "models/bert.h"
#include "optim/adamw.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/loss.h"

namespace {

struct Case {
  const char* name;
  const char* size;  // BertConfig::preset
  int64_t batch, seq;
};

const Case kCases[] = {
    {"bert_tiny_b32_s128", "tiny", 32, 128},
    {"bert_mini_b16_s128", "mini", 16, 128},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Training-step time of dptrain's BERT (JSON lines)", "bert_step_bench"};
  dp::bench::CommonOptions opt;
  opt.iters = 10;
  opt.warmup = 3;
  dp::bench::add_common_options(app, opt);
  CLI11_PARSE(app, argc, argv);
  dp::Runtime runtime(dp::RuntimeOptions{opt.threads});
  const dp::Device device = runtime.cpu();
  for (const Case& c : kCases) {
    if (!opt.selected(c.name)) continue;
    dp::Generator gen(0);
    dp::BertConfig config = dp::BertConfig::preset(c.size, 30522);
    dp::BertForPreTraining model(config, device, gen);
    model.train();
    dp::AdamWOptions o;
    o.lr = 1e-4;
    o.weight_decay = 0.01;
    dp::AdamW adamw(model.parameters(), o);
    // Ids in [1000, 30522) (clear of the special tokens), the last quarter of every other row padding.
    std::vector<int64_t> ids(c.batch * c.seq), key_mask(c.batch * c.seq, 1), masked, labels;
    uint64_t state = 12345;
    auto next = [&state] { return (state = state * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t s = 0; s < c.seq; ++s) {
        const int64_t i = b * c.seq + s;
        const bool pad = b % 2 == 1 && s >= c.seq * 3 / 4;
        ids[i] = pad ? 0 : 1000 + static_cast<int64_t>(next() % 29522);
        key_mask[i] = pad ? 0 : 1;
        if (!pad && next() % 100 < 15) {
          masked.push_back(i);
          labels.push_back(ids[i]);
        }
      }
    dp::BertInputs in;
    in.input_ids = dp::from_vector(ids, {c.batch, c.seq}, device);
    in.attention_mask = dp::padding_attention_mask(dp::from_vector(key_mask, {c.batch, c.seq}, device));
    const dp::Tensor positions = dp::from_vector(masked, {static_cast<int64_t>(masked.size())}, device);
    const dp::Tensor targets = dp::from_vector(labels, {static_cast<int64_t>(labels.size())}, device);
    auto step = [&] {
      const dp::Tensor hidden = model.bert->encode(in).reshape({c.batch * c.seq, config.hidden_size});
      const dp::Tensor picked = dp::embedding(positions, hidden);  // the masked positions' states
      dp::Tensor loss = dp::cross_entropy(model.mlm_logits(picked), targets);
      loss.backward();
      adamw.step();
      adamw.zero_grad(true);
    };
    const dp::bench::Timing t = dp::bench::time_it(step, opt.warmup, opt.iters);
    std::printf("{\"name\": \"%s\", \"threads\": %d, \"median_ms\": %.3f, \"min_ms\": %.3f, \"iters\": %d}\n", c.name,
                opt.threads, t.median_ms, t.min_ms, t.iters);
    std::fflush(stdout);
  }
  return 0;
}

// dptrain side of the BERT training-step benchmark (pairs with bert_reference.py): one step =
// encoder forward on [batch, seq] token ids with a padding mask, the MLM head on the masked
// positions only (gathered, as NVIDIA's and MLPerf's BERT do), cross-entropy, backward, AdamW,
// zero_grad(set_to_none). Dropout on (training). Fixed random ids, 15 % of positions predicted;
// warmup, then median/min over --iters. JSON lines on stdout.
//   bert_step_bench [--threads 2] [--iters 10] [--warmup 3] [--only bert_mini]
//   bert_step_bench --device cuda [--precision bf16] [--block 10] [--tf32]
// On a GPU a sample is --block steps queued back to back between two synchronize() calls
// (train_step_bench's timing); --precision bf16|fp16 runs forward and loss under autocast (float32
// master weights, no loss scaling); the gpu_only cases (BERT-base and -large at sequence 512, the
// MLPerf phase-2 shape) run there only. bert_reference.py takes the same options.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "models/bert.h"
#include "optim/adamw.h"
#include "runtime/autograd/autocast.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/loss.h"

namespace {

struct Case {
  const char* name;
  const char* size;  // BertConfig::preset
  int64_t batch, seq;
  bool gpu_only;  // too slow on a CPU to be useful
};

const Case kCases[] = {
    {"bert_tiny_b32_s128", "tiny", 32, 128, false},
    {"bert_mini_b16_s128", "mini", 16, 128, false},
    {"bert_base_b32_s512", "base", 32, 512, true},
    {"bert_large_b16_s512", "large", 16, 512, true},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Training-step time of dptrain's BERT (JSON lines)", "bert_step_bench"};
  dp::bench::CommonOptions opt;
  opt.iters = 10;
  opt.warmup = 3;
  std::string device_spec = "cpu", precision = "fp32";
  int block = 10;
  bool tf32 = false;
  dp::bench::add_common_options(app, opt);
  app.add_option("--device", device_spec, "cpu, cuda or cuda:N");
  app.add_option("--precision", precision, "fp32, or bf16/fp16 autocast")->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--block", block, "GPU: steps per timed sample (queued back to back)")->check(CLI::PositiveNumber);
  app.add_flag("--tf32", tf32, "GPU: float32 GEMMs on TF32 tensor cores");
  CLI11_PARSE(app, argc, argv);
  dp::RuntimeOptions runtime_options = dp::bench::runtime_options(opt.threads);
  runtime_options.allow_tf32 = tf32;
  dp::Runtime runtime(runtime_options);
  const std::optional<dp::Device> opened = dp::bench::open_device(runtime, device_spec, "bert_step_bench");
  if (!opened) return 2;
  const dp::Device device = *opened;
  const dp::DType autocast = precision == "bf16" ? dp::kBFloat16 : precision == "fp16" ? dp::kFloat16 : dp::kFloat32;
  for (const Case& case_ : kCases) {
    const std::string name = precision == "fp32" ? case_.name : std::string(case_.name) + "_" + precision;
    if (!opt.selected(name) || (case_.gpu_only && !device.is_cuda())) continue;
    const Case& c = case_;
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
      dp::Tensor loss;
      {
        dp::AutocastGuard autocast_scope(autocast);
        const dp::Tensor hidden = model.bert->encode(in).reshape({c.batch * c.seq, config.hidden_size});
        const dp::Tensor picked = dp::embedding(positions, hidden);  // the masked positions' states
        loss = dp::cross_entropy(model.mlm_logits(picked), targets);
      }
      loss.backward();
      adamw.step();
      adamw.zero_grad(true);
    };
    if (device.is_cuda()) {
      const dp::bench::Timing t = dp::bench::time_blocks(step, [&] { device.backend().synchronize(); }, opt.warmup,
                                                         opt.iters, block);
      std::printf("{\"name\": \"%s\", \"device\": \"%s\", \"tf32\": %s, \"median_ms\": %.3f, \"min_ms\": %.3f, "
                  "\"iters\": %d, \"block\": %d}\n",
                  name.c_str(), device.str().c_str(), tf32 ? "true" : "false", t.median_ms, t.min_ms, t.iters, block);
    } else {
      const dp::bench::Timing t = dp::bench::time_it(step, opt.warmup, opt.iters);
      std::printf("{\"name\": \"%s\", \"threads\": %d, \"median_ms\": %.3f, \"min_ms\": %.3f, \"iters\": %d}\n",
                  name.c_str(), opt.threads, t.median_ms, t.min_ms, t.iters);
    }
    std::fflush(stdout);
  }
  return 0;
}

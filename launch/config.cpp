#include "launch/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <fstream>
#include <functional>
#include <filesystem>
#include <map>
#include <sstream>
#include <type_traits>

#include <yaml-cpp/yaml.h>

#include "models/model_names.h"
#include "optim/optimizer_spec.h"
#include "runtime/core/error.h"
#include "runtime/data/dataset_names.h"

namespace dp {

namespace {

// Where a value came from, for messages: "configs/x.yaml:7" or "--set optimizer.lr=-1".
struct Context {
  std::string where;
  std::string key;  // "optimizer.lr"
  // For a section's cross-key checks: where "section.key" was set (its --set, or its file and
  // line), so that an error about another key names that key's origin. Null: `where` for all.
  const std::function<std::string(const std::string&)>* locate = nullptr;
  Context at(const std::string& other_key) const {
    return {locate != nullptr ? (*locate)(other_key) : where, other_key, locate};
  }
};

[[noreturn]] void fail(const Context& c, const std::string& message) {
  throw Error(c.where + ": " + c.key + ": " + message);
}

std::string describe(const YAML::Node& n) {
  if (n.IsNull()) return "nothing (an empty value)";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "'" + n.Scalar() + "'";
}

template <typename T>
T scalar_as(const YAML::Node& n, const Context& c, const char* expectation) {
  if (!n.IsScalar()) fail(c, std::string("expected ") + expectation + ", got " + describe(n));
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // YAML 1.1 (yaml-cpp, PyYAML) reads 064 as octal 52 and refuses 0128: neither is what a
    // batch size or a seed written with a leading zero means.
    const std::string& v = n.Scalar();
    const size_t digits = !v.empty() && (v[0] == '+' || v[0] == '-') ? 1 : 0;
    if (v.size() > digits + 1 && v[digits] == '0' && std::isdigit(static_cast<unsigned char>(v[digits + 1])) != 0) {
      const size_t first = v.find_first_not_of('0', digits);
      fail(c, std::string("expected ") + expectation + ", got '" + v + "': YAML reads a leading 0 as an octal " +
                  "number; write " + v.substr(0, digits) + (first == std::string::npos ? "0" : v.substr(first)));
    }
  }
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    fail(c, std::string("expected ") + expectation + ", got " + describe(n));
  }
}

// ---- Value parsers: one place that knows each kind of value ----
template <typename T>
using Parser = std::function<T(const YAML::Node&, const Context&)>;

// An integer in [low, high]: every count has an upper bound, so that no product of counts
// (epochs x steps, batch x sample bytes) can overflow and a typo (an extra 0s) is caught at load.
Parser<int64_t> integer_in(int64_t low, int64_t high) {
  const std::string expectation = "an integer in [" + std::to_string(low) + ", " + std::to_string(high) + "]";
  return [=](const YAML::Node& n, const Context& c) {
    auto v = scalar_as<int64_t>(n, c, expectation.c_str());
    if (v < low || v > high) fail(c, "expected " + expectation + ", got " + n.Scalar());
    return v;
  };
}

Parser<uint64_t> unsigned_int() {
  return [](const YAML::Node& n, const Context& c) {
    if (n.IsScalar() && !n.Scalar().empty() && n.Scalar()[0] == '-')
      fail(c, "expected a non-negative integer, got " + describe(n));
    return scalar_as<uint64_t>(n, c, "a non-negative integer");
  };
}

// A number in [low, high) or (low, high) — `open_low` excludes low; `closed_high` includes high.
Parser<double> number_in(double low, bool open_low, double high, const char* expectation, bool closed_high = false) {
  return [=](const YAML::Node& n, const Context& c) {
    auto v = scalar_as<double>(n, c, expectation);
    if (!(open_low ? v > low : v >= low) || !(closed_high ? v <= high : v < high)) {
      std::ostringstream os;
      os << "expected " << expectation << ", got " << v;
      fail(c, os.str());
    }
    return v;
  };
}
constexpr double kInf = std::numeric_limits<double>::infinity();
Parser<double> positive_number() { return number_in(0.0, true, kInf, "a positive number"); }
Parser<double> non_negative_number() { return number_in(0.0, false, kInf, "a non-negative number"); }
Parser<double> fraction() { return number_in(0.0, false, 1.0, "a number in [0, 1)"); }

// The watchdog's timeout: 0 turns it off; otherwise whole milliseconds from 1 s to 7 days. Below a
// second a healthy collective under load would be taken for a hang; above a week the millisecond
// and clock arithmetic is no longer exact, and nobody means it.
Parser<double> watchdog_timeout() {
  return [](const YAML::Node& n, const Context& c) {
    const char* expectation = "0 (off) or a number of seconds in [1, 604800]";
    auto v = scalar_as<double>(n, c, expectation);
    if (!(v == 0 || (v >= 1 && v <= limits::kMaxTimeoutSeconds))) {
      std::ostringstream os;
      os << "expected " << expectation << ", got " << v;
      fail(c, os.str());
    }
    return v;
  };
}

Parser<bool> boolean() {
  return [](const YAML::Node& n, const Context& c) { return scalar_as<bool>(n, c, "true or false"); };
}

// A string value is one line of printable text: a control character (a newline, a CR from an
// escape like "run\r") has no use in a name or a path, and yaml-cpp's emitter writes a trailing
// CR unquoted, so to_yaml's output would load back without it (found by tests/fuzz/fuzz_config's
// round trip).
std::string text_scalar(const YAML::Node& n, const Context& c, const char* expectation) {
  auto v = scalar_as<std::string>(n, c, expectation);
  for (unsigned char ch : v) {
    if (ch < 0x20 || ch == 0x7F) {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02X", ch);
      fail(c, std::string("expected ") + expectation + " without control characters, got one with byte " + code);
    }
  }
  return v;
}

Parser<std::string> text() {
  return [](const YAML::Node& n, const Context& c) { return text_scalar(n, c, "a string"); };
}

// A file inside run.output_dir: a relative path without ".." (so that it cannot name, and a new
// run cannot move aside, anything outside the run's folder), naming a file, not a folder.
Parser<std::string> file_in_output_dir() {
  return [](const YAML::Node& n, const Context& c) {
    auto v = text_scalar(n, c, "a file name");
    const std::filesystem::path p(v);
    if (v.empty() || p.is_absolute() || v.back() == '/')
      fail(c, "expected a file name relative to run.output_dir (like metrics.jsonl), got '" + v + "'");
    for (const auto& part : p)
      if (part == ".." || part == ".")
        fail(c, "expected a file name relative to run.output_dir without '.' or '..', got '" + v + "'");
    return v;
  };
}

// The same, or empty (the feature off: logging.mllog).
Parser<std::string> optional_file_in_output_dir() {
  return [](const YAML::Node& n, const Context& c) {
    if (n.IsNull() || (n.IsScalar() && n.Scalar().empty())) return std::string();
    return file_in_output_dir()(n, c);
  };
}

template <size_t N>
Parser<std::string> one_of(const std::array<std::string_view, N>& choices) {
  return [choices](const YAML::Node& n, const Context& c) {
    auto v = scalar_as<std::string>(n, c, "a string");
    for (std::string_view choice : choices)
      if (choice == v) return v;
    std::string list;
    for (std::string_view choice : choices) list += (list.empty() ? "" : ", ") + std::string(choice);
    fail(c, "unknown value '" + v + "' (expected one of: " + list + ")");
  };
}

Parser<std::string> device_spec() {
  return [](const YAML::Node& n, const Context& c) {
    auto v = scalar_as<std::string>(n, c, "a device");
    // cuda:N with N a plain decimal in [0, kMaxDeviceIndex] (no sign, no leading zeros).
    const std::string index = v.rfind("cuda:", 0) == 0 ? v.substr(5) : "";
    const bool index_ok = !index.empty() && index.size() <= 4 &&
                          index.find_first_not_of("0123456789") == std::string::npos &&
                          (index == "0" || index[0] != '0') && std::stoi(index) <= limits::kMaxDeviceIndex;
    if (!(v == "cpu" || v == "cuda" || index_ok))
      fail(c, "expected cpu, cuda or cuda:N with N in [0, " + std::to_string(limits::kMaxDeviceIndex) + "], got '" +
                  v + "'");
    return v;
  };
}

template <typename T>
Parser<std::vector<T>> list_of(Parser<T> element, bool increasing, size_t max_size = 1024) {
  return [=](const YAML::Node& n, const Context& c) {
    if (!n.IsSequence()) fail(c, "expected a list like [1, 2], got " + describe(n));
    if (n.size() > max_size)
      fail(c, "expected at most " + std::to_string(max_size) + " values, got " + std::to_string(n.size()));
    std::vector<T> out;
    for (size_t i = 0; i < n.size(); ++i) {
      Context ci{c.where, c.key + "[" + std::to_string(i) + "]"};
      out.push_back(element(n[i], ci));
      if (increasing && i > 0 && !(out[i] > out[i - 1])) fail(c, "expected increasing values");
    }
    return out;
  };
}

// An empty value (`key: ~` or `key:`) leaves the optional unset (the optimiser's default).
template <typename T>
Parser<std::optional<T>> optional_of(Parser<T> inner) {
  return [=](const YAML::Node& n, const Context& c) -> std::optional<T> {
    if (n.IsNull()) return std::nullopt;
    return inner(n, c);
  };
}

// ---- Tables: a section is a list of fields; adding a key is one line ----
template <typename S>
struct Field {
  const char* key;
  std::function<void(S&, const YAML::Node&, const Context&)> parse;
  std::function<void(const S&, YAML::Emitter&)> emit;
};

// The shortest text that reads back as the same double (0.05, not 0.05000000000000000277).
std::string shortest(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

template <typename S, typename T>
Field<S> field(const char* key, T S::*member, Parser<T> parser) {
  return {key, [member, parser](S& s, const YAML::Node& n, const Context& c) { s.*member = parser(n, c); },
          [member](const S& s, YAML::Emitter& out) {
            if constexpr (std::is_same_v<T, double>) {
              out << shortest(s.*member);
            } else if constexpr (std::is_same_v<T, std::vector<double>>) {
              out << YAML::Flow << YAML::BeginSeq;
              for (double v : s.*member) out << shortest(v);
              out << YAML::EndSeq;
            } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                                 std::is_same_v<T, std::vector<std::string>>) {
              out << YAML::Flow << s.*member;
            } else if constexpr (std::is_same_v<T, std::optional<double>>) {
              if (s.*member) out << shortest(*(s.*member));
              else out << YAML::Null;
            } else if constexpr (std::is_same_v<T, std::optional<bool>>) {
              if (s.*member) out << *(s.*member);
              else out << YAML::Null;
            } else {
              out << s.*member;
            }
          }};
}

template <typename S>
struct Section {
  const char* name;
  S Config::*member;
  std::vector<Field<S>> fields;
  // Cross-field rules, and defaults that depend on other keys (optional).
  std::function<void(S&, const Context&)> check;
};

constexpr std::array<std::string_view, 3> kPrecisions = {"fp32", "bf16", "fp16"};
constexpr std::array<std::string_view, 3> kChannelsLast = {"auto", "true", "false"};
constexpr std::array<std::string_view, 4> kShampooGraftings = {"none", "sgd", "adagrad", "adam"};
constexpr std::array<std::string_view, 2> kBatchings = {"fixed", "max_tokens"};
constexpr std::array<std::string_view, 2> kBalances = {"none", "sort_and_deal"};
constexpr std::array<std::string_view, 2> kPackings = {"none", "greedy"};
constexpr std::array<std::string_view, 5> kSchedules = {"constant", "step", "cosine", "poly", "linear"};

Section<RunConfig> run_section() {
  return {"run", &Config::run,
          {field("name", &RunConfig::name, text()), field("seed", &RunConfig::seed, unsigned_int()),
           field("epochs", &RunConfig::epochs, integer_in(1, limits::kMaxEpochs)),
           field("threads", &RunConfig::threads, integer_in(1, limits::kMaxThreads)),
           field("device", &RunConfig::device, device_spec()), field("output_dir", &RunConfig::output_dir, text()),
           field("log_every", &RunConfig::log_every, integer_in(1, limits::kMaxSteps)),
           field("metrics_file", &RunConfig::metrics_file, file_in_output_dir()),
           field("weights_file", &RunConfig::weights_file, optional_file_in_output_dir()),
           field("checkpoint_every", &RunConfig::checkpoint_every, integer_in(0, limits::kMaxSteps)),
           field("checkpoint_every_epochs", &RunConfig::checkpoint_every_epochs, integer_in(0, limits::kMaxEpochs)),
           field("keep_checkpoints", &RunConfig::keep_checkpoints, integer_in(1, limits::kMaxKeptCheckpoints)),
           field("resume", &RunConfig::resume, text()),
           field("max_steps", &RunConfig::max_steps, integer_in(0, limits::kMaxSteps)),
           field("eval_every_epoch", &RunConfig::eval_every_epoch, boolean()),
           field("eval_every", &RunConfig::eval_every, integer_in(1, limits::kMaxEpochs)),
           field("eval_offset", &RunConfig::eval_offset, integer_in(0, limits::kMaxEpochs - 1)),
           field("eval_every_samples", &RunConfig::eval_every_samples, integer_in(0, limits::kMaxSteps)),
           field("target_accuracy", &RunConfig::target_accuracy, fraction()),
           field("deterministic", &RunConfig::deterministic, boolean()),
           field("allow_tf32", &RunConfig::allow_tf32, boolean()),
           field("cudnn_benchmark", &RunConfig::cudnn_benchmark, boolean()),
           field("check_host_syncs", &RunConfig::check_host_syncs, boolean()),
           field("cuda_graphs", &RunConfig::cuda_graphs, boolean()),
           field("cuda_graph_warmup", &RunConfig::cuda_graph_warmup, integer_in(1, 1000)),
           field("channels_last", &RunConfig::channels_last, one_of(kChannelsLast)),
           field("max_skipped_steps", &RunConfig::max_skipped_steps, integer_in(1, limits::kMaxSkippedSteps)),
           field("cpu_memory_limit_gib", &RunConfig::cpu_memory_limit_gib,
                 number_in(0.0, false, 1048576.0, "a number of GiB in [0, 1048576] (0: automatic)", true)),
           field("precision", &RunConfig::precision, one_of(kPrecisions))},
          [](const RunConfig& r, const Context& c) {
            if (r.eval_offset >= r.eval_every)
              fail(c.at("run.eval_offset"), "expected a number of epochs below run.eval_every (" +
                                                    std::to_string(r.eval_every) + "), got " +
                                                    std::to_string(r.eval_offset));
            if (r.eval_every_samples > 0 && (r.eval_every != 1 || r.eval_offset != 0 || !r.eval_every_epoch))
              fail(c.at("run.eval_every_samples"), "evaluation is scheduled by samples or by epochs "
                                                        "(run.eval_every, eval_offset, eval_every_epoch), not both");
          }};
}

// One number for every channel, or one per channel: `0.5` or `[0.485, 0.456, 0.406]`.
Parser<std::vector<double>> per_channel(Parser<double> element) {
  return [=](const YAML::Node& n, const Context& c) {
    if (n.IsScalar()) return std::vector<double>{element(n, c)};
    std::vector<double> v = list_of(element, false, 3)(n, c);
    if (v.size() != 1 && v.size() != 3)
      fail(c, "expected one number, or three (one per RGB channel), got " + std::to_string(v.size()));
    return v;
  };
}

// [low, high] with 0 < low <= high (<= max when given).
Parser<std::vector<double>> range_pair(double max, const char* expectation) {
  return [=](const YAML::Node& n, const Context& c) {
    std::vector<double> v = list_of(number_in(0.0, true, max, expectation, true), false, 2)(n, c);
    if (v.size() != 2 || v[0] > v[1])
      fail(c, std::string("expected [low, high] with low <= high, each ") + expectation);
    return v;
  };
}

Section<DataConfig> data_section() {
  return {"data", &Config::data,
          {field("dataset", &DataConfig::dataset, one_of(kDatasetNames)), field("root", &DataConfig::root, text()),
           field("batch_size", &DataConfig::batch_size, integer_in(1, limits::kMaxBatch)),
           field("eval_batch_size", &DataConfig::eval_batch_size, integer_in(1, limits::kMaxBatch)),
           field("shuffle", &DataConfig::shuffle, boolean()), field("drop_last", &DataConfig::drop_last, boolean()),
           field("loader_threads", &DataConfig::loader_threads, integer_in(0, limits::kMaxLoaderThreads)),
           field("prefetch", &DataConfig::prefetch, integer_in(1, limits::kMaxPrefetch)),
           // open at -inf too: -.inf used to pass as "finite", then to_yaml wrote "-inf", which
           // does not load back (found by tests/fuzz/fuzz_config's round trip).
           field("mean", &DataConfig::mean, per_channel(number_in(-kInf, true, kInf, "a finite number"))),
           field("std", &DataConfig::std, per_channel(positive_number())),
           field("image_size", &DataConfig::image_size, integer_in(1, limits::kMaxImageSize)),
           field("crop_scale", &DataConfig::crop_scale, range_pair(1.0, "a number in (0, 1]")),
           field("crop_ratio", &DataConfig::crop_ratio, range_pair(kInf, "a positive number")),
           field("horizontal_flip", &DataConfig::horizontal_flip, boolean()),
           field("eval_resize_size", &DataConfig::eval_resize_size, integer_in(1, limits::kMaxImageSize)),
           field("eval_image_size", &DataConfig::eval_image_size, integer_in(1, limits::kMaxImageSize)),
           field("jpeg_dct_scaling", &DataConfig::jpeg_dct_scaling, boolean()),
           field("skip_bad_files", &DataConfig::skip_bad_files, boolean()),
           field("synthetic_train_size", &DataConfig::synthetic_train_size, integer_in(1, limits::kMaxSamples)),
           field("synthetic_eval_size", &DataConfig::synthetic_eval_size, integer_in(1, limits::kMaxSamples)),
           field("vocab", &DataConfig::vocab, text()), field("eval_root", &DataConfig::eval_root, text()),
           field("batching", &DataConfig::batching, one_of(kBatchings)),
           field("max_tokens", &DataConfig::max_tokens, integer_in(0, limits::kMaxTokens)),
           field("balance", &DataConfig::balance, one_of(kBalances)),
           field("packing", &DataConfig::packing, one_of(kPackings)),
           field("max_seq_length", &DataConfig::max_seq_length, integer_in(0, limits::kMaxSeqLength)),
           field("size_multiple", &DataConfig::size_multiple, integer_in(1, limits::kMaxBatch)),
           field("pad_to_multiple", &DataConfig::pad_to_multiple, integer_in(1, limits::kMaxSeqLength)),
           field("mask_prob", &DataConfig::mask_prob, number_in(0.0, true, 1.0, "a number in (0, 1]", true)),
           field("max_predictions", &DataConfig::max_predictions, integer_in(0, limits::kMaxSeqLength))},
          [](DataConfig& d, const Context& c) {
            const bool grey = d.dataset == "fashion_mnist";
            // The dataset's own normalisation for what the recipe left unset.
            if (d.mean.empty()) d.mean = grey ? std::vector<double>{0.2860} : std::vector<double>{0.485, 0.456, 0.406};
            if (d.std.empty()) d.std = grey ? std::vector<double>{0.3530} : std::vector<double>{0.229, 0.224, 0.225};
            for (const char* key : {"mean", "std"}) {
              const std::vector<double>& v = std::string(key) == "mean" ? d.mean : d.std;
              if (grey && v.size() != 1)
                fail(c.at(std::string("data.") + key), "fashion_mnist has one (grey) channel: expected one "
                                                             "number, got " + std::to_string(v.size()));
            }
            const bool text = d.dataset == "text";
            if (!text && (d.batching != "fixed" || d.packing != "none"))
              fail(c.at(d.batching != "fixed" ? "data.batching" : "data.packing"),
                   "token batching and packing are for data.dataset: text; " + d.dataset + " batches images (data.batch_size)");
            if (text && d.batching == "max_tokens" && d.max_tokens == 0)
              fail(c.at("data.max_tokens"), "data.batching max_tokens needs data.max_tokens, the padded tokens per "
                                                 "rank batch (e.g. 8192)");
            if (d.eval_resize_size < d.eval_image_size)
              fail(c.at("data.eval_resize_size"), "the eval image is cut from the resized one: expected at least "
                                                      "data.eval_image_size (" + std::to_string(d.eval_image_size) +
                                                      "), got " + std::to_string(d.eval_resize_size));
          }};
}

Section<ModelConfig> model_section() {
  return {"model", &Config::model,
          {field("name", &ModelConfig::name, one_of(kModelNames)), field("size", &ModelConfig::size, text()),
           field("num_classes", &ModelConfig::num_classes, integer_in(1, limits::kMaxClasses)),
           field("mlp_hidden", &ModelConfig::mlp_hidden, list_of(integer_in(1, limits::kMaxWidth), false, limits::kMaxLayers)),
           field("dropout", &ModelConfig::dropout, fraction()),
           field("zero_init_residual", &ModelConfig::zero_init_residual, boolean()),
           field("init_from", &ModelConfig::init_from, text())},
          nullptr};
}

Section<OptimizerConfig> optimizer_section() {
  return {"optimizer", &Config::optimizer,
          {field("name", &OptimizerConfig::name, one_of(kOptimizerNames)),
           field("lr", &OptimizerConfig::lr, positive_number()),
           field("momentum", &OptimizerConfig::momentum, non_negative_number()),
           field("dampening", &OptimizerConfig::dampening, non_negative_number()),
           field("nesterov", &OptimizerConfig::nesterov, boolean()),
           field("weight_decay", &OptimizerConfig::weight_decay, optional_of(non_negative_number())),
           field("betas", &OptimizerConfig::betas, list_of(number_in(0.0, false, 1.0, "a number in [0, 1]", /*closed_high=*/true), false)),
           field("eps", &OptimizerConfig::eps, optional_of(non_negative_number())),
           field("eta", &OptimizerConfig::eta, positive_number()),
           field("lr_outside_momentum", &OptimizerConfig::lr_outside_momentum, boolean()),
           field("max_grad_norm", &OptimizerConfig::max_grad_norm, non_negative_number()),
           field("clip_grad_norm", &OptimizerConfig::clip_grad_norm, non_negative_number()),
           field("exclude_1d", &OptimizerConfig::exclude_1d, optional_of(boolean())),
           field("exclude_names", &OptimizerConfig::exclude_names, list_of(text(), false)),
           field("max_preconditioner_dim", &OptimizerConfig::max_preconditioner_dim, integer_in(1, limits::kMaxPreconditionerDim)),
           field("precondition_frequency", &OptimizerConfig::precondition_frequency, integer_in(1, limits::kMaxSteps)),
           field("start_preconditioning_step", &OptimizerConfig::start_preconditioning_step,
                 integer_in(-1, limits::kMaxSteps)),
           field("grafting", &OptimizerConfig::grafting, one_of(kShampooGraftings)),
           field("grafting_eps", &OptimizerConfig::grafting_eps, positive_number()),
           field("grafting_beta2", &OptimizerConfig::grafting_beta2, number_in(0.0, true, 1.0, "a number in (0, 1)"))},
          [](OptimizerConfig& o, const Context& c) {
            if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
              fail(c.at("optimizer.nesterov"), "nesterov needs momentum > 0 and dampening 0");
            if (o.betas.size() != 2)
              fail(c.at("optimizer.betas"), "expected two numbers [beta1, beta2], got " +
                                                     std::to_string(o.betas.size()));
            if (o.betas[0] >= 1)
              fail(c.at("optimizer.betas"), "beta1 must be in [0, 1), got " + shortest(o.betas[0]));
            // Shampoo's beta2 = 1 is plain sums of its factors; Adam-type moments need beta2 < 1.
            if (o.name != "shampoo" && o.betas[1] >= 1)
              fail(c.at("optimizer.betas"), o.name + " needs beta2 in [0, 1) (only shampoo takes 1), got " +
                                                     shortest(o.betas[1]));
            if (o.name == "shampoo" && o.betas[1] == 0)
              fail(c.at("optimizer.betas"), "shampoo needs beta2 in (0, 1], got 0");
            if (o.start_preconditioning_step == 0)
              fail(c.at("optimizer.start_preconditioning_step"), "expected a positive integer, or -1 for "
                                                                      "precondition_frequency, got 0");
            // The chosen optimiser's defaults for what the recipe left unset.
            if (!o.weight_decay) o.weight_decay = default_weight_decay(o.name);
            if (!o.eps) o.eps = default_eps(o.name);
            if (!o.exclude_1d) o.exclude_1d = default_exclude_1d(o.name);
          }};
}

Section<ScheduleConfig> schedule_section() {
  return {"schedule", &Config::schedule,
          {field("name", &ScheduleConfig::name, one_of(kSchedules)),
           field("warmup_epochs", &ScheduleConfig::warmup_epochs, number_in(0.0, false, limits::kMaxEpochs, "a number in [0, 100000]", true)),
           field("step_epochs", &ScheduleConfig::step_epochs, list_of(number_in(0.0, true, limits::kMaxEpochs, "a number in (0, 100000]", true), true, limits::kMaxLayers)),
           field("gamma", &ScheduleConfig::gamma, positive_number()),
           field("min_lr", &ScheduleConfig::min_lr, non_negative_number()),
           field("power", &ScheduleConfig::power, positive_number()),
           field("count_skipped_steps", &ScheduleConfig::count_skipped_steps, boolean()),
           field("warmup_steps", &ScheduleConfig::warmup_steps, integer_in(0, limits::kMaxSteps)),
           field("total_steps", &ScheduleConfig::total_steps, integer_in(0, limits::kMaxSteps))},
          [](const ScheduleConfig& s, const Context& c) {
            if (s.name == "step" && s.step_epochs.empty())
              fail(c.at("schedule.step_epochs"), "the step schedule needs at least one milestone");
            if (s.warmup_steps > 0 && s.warmup_epochs > 0)
              fail(c.at("schedule.warmup_steps"), "give the warmup in steps or in epochs "
                                                       "(schedule.warmup_epochs), not both");
            if (s.total_steps > 0 && s.warmup_steps > s.total_steps)
              fail(c.at("schedule.warmup_steps"), "expected at most schedule.total_steps (" +
                                                           std::to_string(s.total_steps) + "), got " +
                                                           std::to_string(s.warmup_steps));
          }};
}

Section<LossConfig> loss_section() {
  return {"loss", &Config::loss, {field("label_smoothing", &LossConfig::label_smoothing, fraction())}, nullptr};
}

Section<LossScaleConfig> loss_scale_section() {
  return {"loss_scale", &Config::loss_scale,
          {field("enabled", &LossScaleConfig::enabled, optional_of(boolean())),
           field("init_scale", &LossScaleConfig::init_scale,
                 number_in(0.0, true, std::numeric_limits<float>::max(), "a positive number up to 3.4e38 (float32)", true)),
           field("growth_factor", &LossScaleConfig::growth_factor, number_in(1.0, true, 65536.0, "a number in (1, 65536]", true)),
           field("backoff_factor", &LossScaleConfig::backoff_factor, number_in(0.0, true, 1.0, "a number in (0, 1)")),
           field("growth_interval", &LossScaleConfig::growth_interval, integer_in(1, std::numeric_limits<int32_t>::max()))},
          nullptr};
}

constexpr std::array<std::string_view, 2> kCommBackends = {"auto", "mpi"};
constexpr std::array<std::string_view, 2> kBufferSyncs = {"broadcast", "average"};
constexpr std::array<std::string_view, 2> kGradDtypes = {"fp32", "bf16"};

Section<DistributedConfig> distributed_section() {
  return {"distributed", &Config::distributed,
          {field("backend", &DistributedConfig::backend, one_of(kCommBackends)),
           field("first_bucket_mb", &DistributedConfig::first_bucket_mb, number_in(0.0, true, limits::kMaxBucketMb, "a number in (0, 65536]", true)),
           field("bucket_mb", &DistributedConfig::bucket_mb, number_in(0.0, true, limits::kMaxBucketMb, "a number in (0, 65536]", true)),
           field("find_unused_parameters", &DistributedConfig::find_unused_parameters, boolean()),
           field("buffer_sync", &DistributedConfig::buffer_sync, one_of(kBufferSyncs)),
           field("timeout_s", &DistributedConfig::timeout_s, watchdog_timeout()),
           field("checkpoint_timeout_s", &DistributedConfig::checkpoint_timeout_s, watchdog_timeout()),
           field("check_agreement", &DistributedConfig::check_agreement, boolean()),
           field("grad_dtype", &DistributedConfig::grad_dtype, one_of(kGradDtypes)),
           field("sync_batchnorm", &DistributedConfig::sync_batchnorm, boolean()),
           field("shards", &DistributedConfig::shards, integer_in(0, limits::kMaxShards))},
          nullptr};
}

constexpr std::array<std::string_view, 2> kMllogBenchmarks = {"resnet", "bert"};
constexpr std::array<std::string_view, 2> kDivisions = {"closed", "open"};
constexpr std::array<std::string_view, 4> kSubmissionStatuses = {"cloud", "onprem", "preview", "research"};

Section<LoggingConfig> logging_section() {
  return {"logging", &Config::logging,
          {field("mllog", &LoggingConfig::mllog, optional_file_in_output_dir()),
           field("benchmark", &LoggingConfig::benchmark, one_of(kMllogBenchmarks)),
           field("submission_org", &LoggingConfig::submission_org, text()),
           field("submission_platform", &LoggingConfig::submission_platform, text()),
           field("submission_division", &LoggingConfig::submission_division, one_of(kDivisions)),
           field("submission_status", &LoggingConfig::submission_status, one_of(kSubmissionStatuses))},
          nullptr};
}

// Calls fn(section) for every section, in file order.
template <typename Fn>
void for_each_section(Fn&& fn) {
  fn(run_section());
  fn(data_section());
  fn(model_section());
  fn(optimizer_section());
  fn(schedule_section());
  fn(loss_section());
  fn(loss_scale_section());
  fn(distributed_section());
  fn(logging_section());
}

template <typename S>
std::string key_list(const Section<S>& s) {
  std::string out;
  for (const auto& f : s.fields) out += (out.empty() ? "" : ", ") + std::string(f.key);
  return out;
}

std::string section_list() {
  std::string out;
  for_each_section([&](const auto& s) { out += (out.empty() ? "" : ", ") + std::string(s.name); });
  return out;
}

// Origins of overridden values, by "section.key".
using Origins = std::map<std::string, std::string>;

std::string where_of(const std::string& source, const YAML::Node& n) {
  if (n.Mark().is_null()) return source;
  return source + ":" + std::to_string(n.Mark().line + 1);
}

// The name of a mapping's key. Keys are plain names: a list or mapping used as a key (YAML's
// `? [a, b] : 1`) is an error here, not a library exception later.
std::string key_name(const YAML::Node& key, const std::string& source, const std::string& in) {
  if (!key.IsScalar())
    throw Error(where_of(source, key) + ": " + in + ": expected a key name, got " + describe(key) + " as a key");
  return key.Scalar();
}

// yaml-cpp keeps both entries of a duplicated key and `node[key]` finds only one of them, so a
// recipe that sets a key twice would silently lose one value: refuse it, naming both lines.
void check_no_duplicate_keys(const YAML::Node& map, const std::string& source, const std::string& in) {
  std::map<std::string, YAML::Node> seen;
  for (const auto& kv : map) {
    const std::string name = key_name(kv.first, source, in);
    auto [it, fresh] = seen.emplace(name, kv.first);
    if (!fresh) {
      const std::string path = in == "the configuration" ? name : in + "." + name;
      throw Error(where_of(source, kv.first) + ": " + path + ": given twice (first at line " +
                  std::to_string(it->second.Mark().line + 1) + "); keep one");
    }
  }
}

// The document's shape before any value is read: a mapping of sections (or empty), each a
// mapping of keys (or empty), with plain, unique key names.
void check_shape(const YAML::Node& root, const std::string& source) {
  if (root.IsNull()) return;
  if (!root.IsMap())
    throw Error(where_of(source, root) + ": expected a mapping of sections (" + section_list() + "), got " +
                describe(root));
  check_no_duplicate_keys(root, source, "the configuration");
  for (const auto& kv : root) {
    const std::string name = kv.first.Scalar();
    bool known = false;
    for_each_section([&](const auto& s) { known = known || name == s.name; });
    if (!known)
      throw Error(where_of(source, kv.first) + ": unknown section '" + name + "' (known sections: " + section_list() +
                  ")");
    if (kv.second.IsNull()) continue;
    if (!kv.second.IsMap()) {
      std::string keys;
      for_each_section([&](const auto& s) {
        if (name == s.name) keys = key_list(s);
      });
      throw Error(where_of(source, kv.second) + ": " + name + ": expected a mapping of keys (" + keys + "), got " +
                  describe(kv.second));
    }
    check_no_duplicate_keys(kv.second, source, name);
  }
}

bool optimizer_reads(const std::string& optimizer, std::string_view key) {
  const std::vector<std::string_view>& keys = optimizer_keys(optimizer);
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// A key of the optimizer section that the chosen optimiser does not read is refused like an
// unknown key (`eta` under SGD would otherwise be silently ignored), naming the optimisers that
// do read it.
void check_optimizer_keys(const YAML::Node& root, const std::string& source, const Origins& origins,
                          const std::string& optimizer) {
  const YAML::Node node = root.IsMap() ? root["optimizer"] : YAML::Node();
  if (!node || !node.IsMap()) return;
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    if (optimizer_reads(optimizer, key)) continue;
    std::string readers, own;
    for (std::string_view name : kOptimizerNames)
      if (optimizer_reads(std::string(name), key)) readers += (readers.empty() ? "" : ", ") + std::string(name);
    for (std::string_view k : optimizer_keys(optimizer)) own += (own.empty() ? "" : ", ") + std::string(k);
    auto it = origins.find("optimizer." + key);
    const std::string where = it != origins.end() ? it->second : where_of(source, kv.first);
    throw Error(where + ": optimizer." + key + ": " + optimizer + " does not use this key (only " + readers +
                " do" + (readers.find(',') == std::string::npos ? "es" : "") + "); remove it or choose one of them. " +
                optimizer + " reads: " + own);
  }
}

// The files a run writes into run.output_dir must be distinct, none inside another's name, and
// none in `checkpoints` (the checkpoints' folder): one would overwrite, or move aside as an
// earlier run's, another of the same run — or fail only when it is written, after training.
void check_output_files(const Config& config, const Context& c) {
  const std::vector<std::pair<std::string, std::string>> files = {
      {"run.metrics_file", config.run.metrics_file},
      {"run.weights_file", config.run.weights_file},
      {"logging.mllog", config.logging.mllog}};
  for (size_t i = 0; i < files.size(); ++i) {
    const auto& [key, name] = files[i];
    if (name.empty()) continue;
    const std::filesystem::path path = std::filesystem::path(name).lexically_normal();
    if (*path.begin() == "checkpoints")
      fail(c.at(key), "'" + name + "' would be run.output_dir/checkpoints or in it, the folder of the run's "
                      "checkpoints: choose another name");
    for (size_t j = 0; j < i; ++j) {
      const auto& [other_key, other_name] = files[j];
      if (other_name.empty()) continue;
      const std::filesystem::path other = std::filesystem::path(other_name).lexically_normal();
      if (path == other)
        fail(c.at(key), "'" + name + "' is " + other_key + " too: choose another name" +
                            (key == "run.metrics_file" ? "" : " (or empty for none)"));
      const auto inside = [](const std::filesystem::path& inner, const std::filesystem::path& outer) {
        const auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
        return o == outer.end() && i != inner.end();
      };
      if (inside(path, other) || inside(other, path))
        fail(c.at(key), "'" + name + "' and " + other_key + " '" + other_name +
                            "': one would be a folder holding the other; choose names that do not nest");
    }
  }
}

// Schedule and model keys that only some schedules or models read, and which those are (every
// schedule reads name, warmup_epochs, warmup_steps and count_skipped_steps; every model name,
// num_classes, init_from).
std::vector<std::string_view> readers_of(std::string_view section, std::string_view key) {
  if (section == "schedule") {
    if (key == "step_epochs" || key == "gamma") return {"step"};
    if (key == "min_lr" || key == "total_steps") return {"cosine", "poly", "linear"};
    if (key == "power") return {"poly"};
  }
  if (section == "model") {
    if (key == "size") return {"bert"};
    if (key == "mlp_hidden") return {"mlp"};
  }
  return {};  // read by all
}

// A schedule or model key set away from its default that the chosen schedule or model does not
// read is refused (`gamma` and `step_epochs` without `name: step` would leave the learning rate
// constant, silently), naming those that read it. At its default it is what --print-config
// writes, and passes.
template <typename S>
void check_unread_keys(const Section<S>& section, const Config& config, const std::string& chosen,
                       const std::function<std::string(const std::string&)>& locate) {
  const Config defaults;
  for (const auto& f : section.fields) {
    const std::vector<std::string_view> readers = readers_of(section.name, f.key);
    if (readers.empty() || std::find(readers.begin(), readers.end(), chosen) != readers.end()) continue;
    YAML::Emitter set, standard;
    f.emit(config.*(section.member), set);
    f.emit(defaults.*(section.member), standard);
    if (std::string_view(set.c_str()) == std::string_view(standard.c_str())) continue;
    std::string names;
    for (std::string_view r : readers) names += (names.empty() ? "" : ", ") + std::string(r);
    const std::string path = std::string(section.name) + "." + f.key;
    throw Error(locate(path) + ": " + path + ": the " + chosen + " " + section.name + " does not read it (only " +
                names + (readers.size() == 1 ? " does" : " do") + "); remove it, or set " + section.name +
                ".name to " + (readers.size() == 1 ? "" : "one of ") + names);
  }
}

Config parse_root(const YAML::Node& root, const std::string& source, const Origins& origins) {
  check_shape(root, source);
  // Where "section.key" came from: its --set, or the line of its key in the file.
  const std::function<std::string(const std::string&)> locate = [&](const std::string& path) {
    if (auto it = origins.find(path); it != origins.end()) return it->second;
    const size_t dot = path.find('.');
    if (root.IsMap() && dot != std::string::npos) {
      const YAML::Node section = root[path.substr(0, dot)];
      if (section && section.IsMap())
        for (const auto& kv : section)
          if (kv.first.IsScalar() && kv.first.Scalar() == path.substr(dot + 1)) return where_of(source, kv.first);
    }
    return source;
  };
  Config config;
  for_each_section([&](const auto& section) {
    auto& target = config.*(section.member);
    const YAML::Node node = root.IsMap() ? root[section.name] : YAML::Node();
    const YAML::Node keys = node && node.IsMap() ? node : YAML::Node(YAML::NodeType::Map);
    for (const auto& kv : keys) {
      const std::string key = kv.first.Scalar();
      const std::string path = std::string(section.name) + "." + key;
      auto it = origins.find(path);
      const std::string where = it != origins.end() ? it->second : where_of(source, kv.second);
      const auto* f = [&]() -> decltype(&section.fields[0]) {
        for (const auto& fld : section.fields)
          if (key == fld.key) return &fld;
        return nullptr;
      }();
      if (!f)
        throw Error(where_of(source, kv.first) + ": unknown key '" + path + "' (known keys in '" + section.name +
                    "': " + key_list(section) + ")");
      f->parse(target, kv.second, Context{where, path});
    }
    // Runs for an absent section too: a check may fill in defaults that depend on other keys.
    if (section.check) section.check(target, Context{source, section.name, &locate});
  });
  check_optimizer_keys(root, source, origins, config.optimizer.name);
  check_unread_keys(schedule_section(), config, config.schedule.name, locate);
  check_unread_keys(model_section(), config, config.model.name, locate);
  // The decay's end below its start is the schedule's to refuse too, before anything runs.
  const std::vector<std::string_view> decays = readers_of("schedule", "min_lr");
  if (std::find(decays.begin(), decays.end(), config.schedule.name) != decays.end() &&
      config.schedule.min_lr > config.optimizer.lr)
    fail(Context{source, "schedule", &locate}.at("schedule.min_lr"),
         detail::concat("expected at most optimizer.lr (", config.optimizer.lr, "): the ", config.schedule.name,
                        " schedule decays from optimizer.lr to min_lr, got ", config.schedule.min_lr));
  check_output_files(config, Context{source, "run", &locate});
  return config;
}

// Applies "section.key=value" overrides onto the document (whose shape check_shape has passed),
// remembering where each value came from.
void apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides, Origins& origins) {
  for (const std::string& o : overrides) {
    const std::string origin = "--set " + o;
    const size_t eq = o.find('=');
    if (eq == std::string::npos) throw Error(origin + ": expected section.key=value");
    const std::string path = o.substr(0, eq), value = o.substr(eq + 1);
    const size_t dot = path.find('.');
    if (dot == std::string::npos || path.find('.', dot + 1) != std::string::npos)
      throw Error(origin + ": expected section.key=value (e.g. optimizer.lr=0.1)");
    const std::string section = path.substr(0, dot), key = path.substr(dot + 1);
    bool section_known = false, key_known = false;
    std::string keys;
    for_each_section([&](const auto& s) {
      if (section != s.name) return;
      section_known = true;
      keys = key_list(s);
      for (const auto& f : s.fields) key_known = key_known || key == f.key;
    });
    if (!section_known)
      throw Error(origin + ": unknown section '" + section + "' (known sections: " + section_list() + ")");
    if (!key_known)
      throw Error(origin + ": unknown key '" + path + "' (known keys in '" + section + "': " + keys + ")");
    YAML::Node parsed;
    try {
      parsed = YAML::Load(value);
    } catch (const YAML::Exception& e) {
      throw Error(origin + ": the value is not valid YAML: " + e.msg);
    }
    if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    YAML::Node section_node = root[section];
    if (!section_node || section_node.IsNull()) {
      root[section] = YAML::Node(YAML::NodeType::Map);
      section_node = root[section];
    }
    // `--set key=~` (or null) takes the key out of the recipe, as if it had never been written: its
    // default applies (also where ~ itself is no value the key takes, e.g. a momentum the next
    // optimiser does not read). An empty value stays one: `--set run.weights_file=` turns it off.
    if (parsed.IsNull() && value.find_first_not_of(" \t") != std::string::npos)
      section_node.remove(key);
    else
      section_node[key] = parsed;
    origins[path] = origin;
  }
}

// The line of a document marker (`---` or `...` at column 0, which YAML reserves for them: no
// scalar may hold one) that ends the first document's content and is followed by more content; 0
// when the text is one document. Read from the text, not with YAML::LoadAll, which loops without
// end on some malformed input (yaml-cpp 0.7; found by tests/fuzz/fuzz_config).
int second_document_line(const std::string& text) {
  std::istringstream in(text);
  std::string l;
  int n = 0, marker = 0;
  bool content = false;
  while (std::getline(in, l)) {
    ++n;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    const bool is_marker =
        (l.rfind("---", 0) == 0 || l.rfind("...", 0) == 0) && (l.size() == 3 || l[3] == ' ' || l[3] == '\t');
    const std::string rest = is_marker ? l.substr(3) : l;
    const size_t first = rest.find_first_not_of(" \t");
    // Content: anything but blanks, comments and directives (%YAML before the first marker).
    const bool has_content = first != std::string::npos && rest[first] != '#' && !(!is_marker && l[0] == '%');
    if (is_marker && content && marker == 0) marker = n;
    if (has_content) {
      if (marker > 0) return marker;
      content = true;
    }
  }
  return 0;
}

// A recipe is a few KiB; a larger file is almost surely the wrong one (a dataset, a binary).
constexpr std::uintmax_t kMaxConfigBytes = 1 << 20;

Config load_from_text(const std::string& text, const std::string& source, const std::vector<std::string>& overrides) {
  // One document per recipe: yaml-cpp's Load reads the first and drops the rest silently.
  if (const int line = second_document_line(text); line > 0)
    throw Error(source + ":" + std::to_string(line) + ": a second YAML document begins here: a recipe is one " +
                "document, and the rest would be ignored; merge them or remove the '---'");
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error(source + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                ": malformed YAML: " + e.msg);
  }
  // The file's shape is checked before the overrides change the document, so that a root that
  // is a list, or `run: 5`, is reported against the file, not hidden by --set.
  check_shape(root, source);
  Origins origins;
  apply_overrides(root, overrides, origins);
  try {
    return parse_root(root, source, origins);
  } catch (const YAML::Exception& e) {
    // Every expected problem is reported above with its key; this is the safety net that still
    // names the file and line if yaml-cpp throws somewhere unforeseen.
    throw Error(source + ":" + std::to_string(e.mark.line + 1) + ": cannot read the configuration: " + e.msg);
  }
}

}  // namespace

Config config_from_yaml_string(const std::string& yaml, const std::string& source_name,
                               const std::vector<std::string>& overrides) {
  return load_from_text(yaml, source_name, overrides);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::directory)
    throw Error("config file '" + path + "' is a directory; give the recipe's YAML file, e.g. " + path +
                "/fashion_mnist.yaml");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open config file '" + path + "': " + std::strerror(errno));
  std::string text;
  char chunk[1 << 14];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    text.append(chunk, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxConfigBytes)
      throw Error("config file '" + path + "' is larger than " + std::to_string(kMaxConfigBytes >> 20) +
                  " MiB; a recipe is a small YAML file (is this the right file?)");
  }
  if (in.bad()) throw Error("cannot read config file '" + path + "': " + std::strerror(errno));
  return load_from_text(text, path, overrides);
}

std::map<std::string, std::string> config_key_values(const std::string& yaml) {
  std::map<std::string, std::string> out;
  std::istringstream in(yaml);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (line[0] != ' ') {
      section = line.substr(0, colon);
      continue;
    }
    const size_t begin = line.find_first_not_of(' ');
    const std::string value = colon + 1 < line.size() ? line.substr(colon + 2) : "";
    out[section + "." + line.substr(begin, colon - begin)] = value;
  }
  return out;
}

std::string to_yaml(const Config& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for_each_section([&](const auto& section) {
    out << YAML::Key << section.name << YAML::Value << YAML::BeginMap;
    for (const auto& f : section.fields) {
      // The optimiser's own keys only: the resolved config loads back as it is.
      if (std::string_view(section.name) == "optimizer" && !optimizer_reads(config.optimizer.name, f.key)) continue;
      out << YAML::Key << f.key << YAML::Value;
      f.emit(config.*(section.member), out);
    }
    out << YAML::EndMap;
  });
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

bool operator==(const Config& a, const Config& b) { return to_yaml(a) == to_yaml(b); }

ScheduleSteps schedule_steps(const Config& config, int64_t steps_per_epoch) {
  const ScheduleConfig& s = config.schedule;
  ScheduleSteps out;
  out.total = s.total_steps > 0 ? s.total_steps : config.run.epochs * steps_per_epoch;
  out.warmup = s.warmup_steps > 0 ? s.warmup_steps
                                  : static_cast<int64_t>(std::llround(s.warmup_epochs * static_cast<double>(steps_per_epoch)));
  return out;
}

// NOTE [ A schedule that does not fit its run ]
// Steps per epoch are known only once the data is (dataset size, batch size, ranks, token
// batching), so these checks run when the run is built, not when the config is read. A cosine,
// poly or linear schedule decays from the end of its warmup to its last step: a warmup as long as
// the schedule leaves nothing to decay, which is refused (the recipe's keys named). A constant or
// step schedule still trains with a warmup that never ends, or with a step milestone after the
// end — the learning rate then never reaches optimizer.lr, or that decay never happens — which is
// what a recipe run with fewer epochs gives, so the run goes on and says so. run.max_steps, a cut
// the user asks for, is not the schedule's end and is not compared.
std::vector<std::string> check_schedule_fits(const Config& config, int64_t steps_per_epoch) {
  const ScheduleConfig& s = config.schedule;
  const ScheduleSteps steps = schedule_steps(config, steps_per_epoch);
  const bool decays = s.name == "cosine" || s.name == "poly" || s.name == "linear";
  // schedule.total_steps is where a decay ends; constant and step do not read it and run to the
  // run's end.
  const bool by_total_steps = decays && s.total_steps > 0;
  const int64_t last = by_total_steps ? steps.total : config.run.epochs * steps_per_epoch;
  const std::string warmup =
      s.warmup_steps > 0 ? detail::concat("schedule.warmup_steps (", s.warmup_steps, ")")
                         : detail::concat("schedule.warmup_epochs (", s.warmup_epochs, " = ", steps.warmup, " steps)");
  const std::string end = by_total_steps ? detail::concat("schedule.total_steps (", s.total_steps, ")")
                                         : detail::concat("run.epochs (", config.run.epochs, " x ", steps_per_epoch,
                                                          " steps = ", last, ")");
  if (decays && steps.warmup >= last)
    throw Error(detail::concat(warmup, " must end before the ", s.name, " schedule does at ", end,
                               ": shorten the warmup or lengthen the run"));
  std::vector<std::string> warnings;
  if (steps.warmup > 0 && steps.warmup >= last)
    warnings.push_back(detail::concat(warmup, " outlasts the schedule, which ends at ", end,
                                      ": the learning rate stays below optimizer.lr (", config.optimizer.lr, ")"));
  if (s.name == "step")
    for (double e : s.step_epochs) {
      const auto milestone = static_cast<int64_t>(std::llround(e * static_cast<double>(steps_per_epoch)));
      if (milestone >= last)
        warnings.push_back(detail::concat("schedule.step_epochs: the decay at epoch ", e, " (step ", milestone,
                                          ") comes after the schedule ends at ", end, ": it never happens"));
    }
  return warnings;
}

DType autocast_dtype_of(const std::string& precision) {
  if (precision == "bf16") return kBFloat16;
  if (precision == "fp16") return kFloat16;
  DP_CHECK(precision == "fp32", "run.precision: expected one of fp32, bf16, fp16, got '", precision, "'");
  return kFloat32;
}

}  // namespace dp

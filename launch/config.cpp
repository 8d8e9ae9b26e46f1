#include "launch/config.h"

#include <cerrno>
#include <charconv>
#include <limits>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "optim/registry.h"
#include "runtime/core/error.h"

namespace dp {

namespace {

// Where a value came from, for messages: "configs/x.yaml:7" or "--set optimizer.lr=-1".
struct Context {
  std::string where;
  std::string key;  // "optimizer.lr"
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
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    fail(c, std::string("expected ") + expectation + ", got " + describe(n));
  }
}

// ---- Value parsers: one place that knows each kind of value ----
template <typename T>
using Parser = std::function<T(const YAML::Node&, const Context&)>;

Parser<int64_t> integer_at_least(int64_t min, const char* expectation) {
  return [=](const YAML::Node& n, const Context& c) {
    auto v = scalar_as<int64_t>(n, c, expectation);
    if (v < min) fail(c, std::string("expected ") + expectation + ", got " + std::to_string(v));
    return v;
  };
}
Parser<int64_t> positive_int() { return integer_at_least(1, "a positive integer"); }
Parser<int64_t> non_negative_int() { return integer_at_least(0, "a non-negative integer"); }

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

Parser<bool> boolean() {
  return [](const YAML::Node& n, const Context& c) { return scalar_as<bool>(n, c, "true or false"); };
}

Parser<std::string> text() {
  return [](const YAML::Node& n, const Context& c) { return scalar_as<std::string>(n, c, "a string"); };
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
    bool ok = v == "cpu" || v == "cuda" ||
              (v.rfind("cuda:", 0) == 0 && v.size() > 5 && v.find_first_not_of("0123456789", 5) == std::string::npos);
    if (!ok) fail(c, "expected cpu, cuda or cuda:N, got '" + v + "'");
    return v;
  };
}

template <typename T>
Parser<std::vector<T>> list_of(Parser<T> element, bool increasing) {
  return [=](const YAML::Node& n, const Context& c) {
    if (!n.IsSequence()) fail(c, "expected a list like [1, 2], got " + describe(n));
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

constexpr std::array<std::string_view, 1> kDatasets = {"fashion_mnist"};
constexpr std::array<std::string_view, 4> kShampooGraftings = {"none", "sgd", "adagrad", "adam"};
constexpr std::array<std::string_view, 5> kSchedules = {"constant", "step", "cosine", "poly", "linear"};

Section<RunConfig> run_section() {
  return {"run", &Config::run,
          {field("name", &RunConfig::name, text()), field("seed", &RunConfig::seed, unsigned_int()),
           field("epochs", &RunConfig::epochs, positive_int()), field("threads", &RunConfig::threads, positive_int()),
           field("device", &RunConfig::device, device_spec()), field("output_dir", &RunConfig::output_dir, text()),
           field("log_every", &RunConfig::log_every, positive_int()),
           field("metrics_file", &RunConfig::metrics_file, text()),
           field("max_steps", &RunConfig::max_steps, non_negative_int()),
           field("eval_every_epoch", &RunConfig::eval_every_epoch, boolean()),
           field("deterministic", &RunConfig::deterministic, boolean()),
           field("allow_tf32", &RunConfig::allow_tf32, boolean()),
           field("cudnn_benchmark", &RunConfig::cudnn_benchmark, boolean())},
          nullptr};
}

Section<DataConfig> data_section() {
  return {"data", &Config::data,
          {field("dataset", &DataConfig::dataset, one_of(kDatasets)), field("root", &DataConfig::root, text()),
           field("batch_size", &DataConfig::batch_size, positive_int()),
           field("eval_batch_size", &DataConfig::eval_batch_size, positive_int()),
           field("shuffle", &DataConfig::shuffle, boolean()), field("drop_last", &DataConfig::drop_last, boolean()),
           field("loader_threads", &DataConfig::loader_threads, non_negative_int()),
           field("prefetch", &DataConfig::prefetch, positive_int()), field("mean", &DataConfig::mean, number_in(-kInf, false, kInf, "a number")),
           field("std", &DataConfig::std, positive_number())},
          nullptr};
}

Section<ModelConfig> model_section() {
  return {"model", &Config::model,
          {field("name", &ModelConfig::name, one_of(kKnownModels)),
           field("num_classes", &ModelConfig::num_classes, positive_int()),
           field("mlp_hidden", &ModelConfig::mlp_hidden, list_of(positive_int(), false)),
           field("dropout", &ModelConfig::dropout, fraction())},
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
           field("max_preconditioner_dim", &OptimizerConfig::max_preconditioner_dim, positive_int()),
           field("precondition_frequency", &OptimizerConfig::precondition_frequency, positive_int()),
           field("start_preconditioning_step", &OptimizerConfig::start_preconditioning_step,
                 integer_at_least(-1, "a positive integer, or -1 for precondition_frequency")),
           field("grafting", &OptimizerConfig::grafting, one_of(kShampooGraftings)),
           field("grafting_eps", &OptimizerConfig::grafting_eps, positive_number()),
           field("grafting_beta2", &OptimizerConfig::grafting_beta2, number_in(0.0, true, 1.0, "a number in (0, 1)"))},
          [](OptimizerConfig& o, const Context& c) {
            if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
              fail({c.where, "optimizer.nesterov"}, "nesterov needs momentum > 0 and dampening 0");
            if (o.betas.size() != 2)
              fail({c.where, "optimizer.betas"}, "expected two numbers [beta1, beta2], got " +
                                                     std::to_string(o.betas.size()));
            if (o.betas[0] >= 1)
              fail({c.where, "optimizer.betas"}, "beta1 must be in [0, 1), got " + shortest(o.betas[0]));
            // Shampoo's beta2 = 1 is plain sums of its factors; Adam-type moments need beta2 < 1.
            if (o.name != "shampoo" && o.betas[1] >= 1)
              fail({c.where, "optimizer.betas"}, o.name + " needs beta2 in [0, 1) (only shampoo takes 1), got " +
                                                     shortest(o.betas[1]));
            if (o.name == "shampoo" && o.betas[1] == 0)
              fail({c.where, "optimizer.betas"}, "shampoo needs beta2 in (0, 1], got 0");
            if (o.start_preconditioning_step == 0)
              fail({c.where, "optimizer.start_preconditioning_step"}, "expected a positive integer, or -1 for "
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
           field("warmup_epochs", &ScheduleConfig::warmup_epochs, non_negative_number()),
           field("step_epochs", &ScheduleConfig::step_epochs, list_of(positive_number(), true)),
           field("gamma", &ScheduleConfig::gamma, positive_number()),
           field("min_lr", &ScheduleConfig::min_lr, non_negative_number()),
           field("power", &ScheduleConfig::power, positive_number()),
           field("count_skipped_steps", &ScheduleConfig::count_skipped_steps, boolean())},
          [](const ScheduleConfig& s, const Context& c) {
            if (s.name == "step" && s.step_epochs.empty())
              fail({c.where, "schedule.step_epochs"}, "the step schedule needs at least one milestone");
          }};
}

Section<LossConfig> loss_section() {
  return {"loss", &Config::loss, {field("label_smoothing", &LossConfig::label_smoothing, fraction())}, nullptr};
}

constexpr std::array<std::string_view, 2> kCommBackends = {"auto", "mpi"};
constexpr std::array<std::string_view, 2> kBufferSyncs = {"broadcast", "average"};

Section<DistributedConfig> distributed_section() {
  return {"distributed", &Config::distributed,
          {field("backend", &DistributedConfig::backend, one_of(kCommBackends)),
           field("first_bucket_mb", &DistributedConfig::first_bucket_mb, positive_number()),
           field("bucket_mb", &DistributedConfig::bucket_mb, positive_number()),
           field("find_unused_parameters", &DistributedConfig::find_unused_parameters, boolean()),
           field("buffer_sync", &DistributedConfig::buffer_sync, one_of(kBufferSyncs)),
           field("timeout_s", &DistributedConfig::timeout_s, non_negative_number()),
           field("check_agreement", &DistributedConfig::check_agreement, boolean())},
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
  fn(distributed_section());
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

Config parse_root(const YAML::Node& root, const std::string& source, const Origins& origins) {
  if (!root.IsNull() && !root.IsMap())
    throw Error(source + ": expected a mapping of sections (" + section_list() + "), got " + describe(root));
  Config config;
  // Unknown sections.
  if (root.IsMap()) {
    for (const auto& kv : root) {
      const std::string name = kv.first.as<std::string>();
      bool known = false;
      for_each_section([&](const auto& s) { known = known || name == s.name; });
      if (!known)
        throw Error(where_of(source, kv.first) + ": unknown section '" + name + "' (known sections: " + section_list() + ")");
    }
  }
  for_each_section([&](const auto& section) {
    auto& target = config.*(section.member);
    const YAML::Node node = root.IsMap() ? root[section.name] : YAML::Node();
    const bool present = node && !node.IsNull();
    if (present && !node.IsMap())
      throw Error(where_of(source, node) + ": " + section.name + ": expected a mapping of keys (" + key_list(section) +
                  "), got " + describe(node));
    const YAML::Node keys = present ? node : YAML::Node(YAML::NodeType::Map);
    for (const auto& kv : keys) {
      const std::string key = kv.first.as<std::string>();
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
    if (section.check) section.check(target, Context{source, section.name});
  });
  return config;
}

// Applies "section.key=value" overrides onto the document, remembering where each came from.
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
    if (!root.IsMap()) root = YAML::Node(YAML::NodeType::Map);
    if (!root[section] || root[section].IsNull()) root[section] = YAML::Node(YAML::NodeType::Map);
    root[section][key] = parsed;
    origins[path] = origin;
  }
}

Config load_from_text(const std::string& text, const std::string& source, const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw Error(source + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                ": malformed YAML: " + e.msg);
  }
  Origins origins;
  apply_overrides(root, overrides, origins);
  return parse_root(root, source, origins);
}

}  // namespace

Config config_from_yaml_string(const std::string& yaml, const std::string& source_name,
                               const std::vector<std::string>& overrides) {
  return load_from_text(yaml, source_name, overrides);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open config file '" + path + "': " + std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return load_from_text(buffer.str(), path, overrides);
}

std::string to_yaml(const Config& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for_each_section([&](const auto& section) {
    out << YAML::Key << section.name << YAML::Value << YAML::BeginMap;
    for (const auto& f : section.fields) {
      out << YAML::Key << f.key << YAML::Value;
      f.emit(config.*(section.member), out);
    }
    out << YAML::EndMap;
  });
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

bool operator==(const Config& a, const Config& b) { return to_yaml(a) == to_yaml(b); }

}  // namespace dp

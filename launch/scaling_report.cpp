#include "launch/scaling_report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "launch/version.h"
#include "runtime/core/error.h"

namespace dp {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The metrics file of `run`: the file itself, or <folder>/metrics.jsonl.
std::string metrics_file_of(const std::string& run) {
  std::error_code ec;
  if (fs::is_directory(run, ec)) {
    const fs::path file = fs::path(run) / "metrics.jsonl";
    DP_CHECK(fs::exists(file, ec), "scaling-report: ", run, " is a folder without metrics.jsonl (a run writes it to "
             "run.output_dir, or where run.metrics_file says)");
    return file.string();
  }
  return run;
}

std::optional<double> number_at(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// A count (ranks, nodes, a batch): a whole number from 1 to 2^53, checked as a double (casting
// one beyond int64's range is undefined); absent: nullopt.
std::optional<int64_t> count_at(const json& object, const char* key, const std::string& where) {
  const std::optional<double> v = number_at(object, key);
  if (!v) return std::nullopt;
  DP_CHECK(*v >= 1 && *v <= 9007199254740992.0 && *v == std::floor(*v), "scaling-report: ", where, ": ", key, " ",
           object.at(key).dump(), " is not a count (a whole number from 1)");
  return static_cast<int64_t>(*v);
}

std::string string_at(const json& object, const char* key, const std::string& fallback = "") {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// "cuda:3" → "cuda": runs on different GPUs of one kind compare.
std::string device_kind(const std::string& device) { return device.substr(0, device.find(':')); }

void take_comm(const json& comm, RunSummary& s) {
  if (!comm.is_object()) return;
  if (auto v = number_at(comm, "comm_ms")) s.comm_ms = v;
  if (auto v = number_at(comm, "exposed_ms")) s.exposed_ms = v;
  if (auto v = number_at(comm, "hidden_pct")) s.hidden_pct = v;
}

}  // namespace

RunSummary summarize_run(const std::string& run, int skip_records) {
  DP_CHECK(skip_records >= 0, "scaling-report: --skip must be 0 or more, got ", skip_records);
  RunSummary s;
  s.label = run;
  s.path = metrics_file_of(run);
  std::ifstream in(s.path);
  DP_CHECK(in.is_open(), "scaling-report: cannot open '", s.path, "': ", std::strerror(errno));
  bool started = false;
  int segment_records = 0;  // step records since the last start (a resumed run warms up again)
  std::vector<double> rates, all_rates;  // after each start's warm-up records; every one
  std::optional<double> last_accuracy;
  double tokens = 0;
  bool text = false;
  std::optional<json> last_step_comm;
  std::map<std::string, std::vector<double>> window_phases;
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json record;
    try {
      record = json::parse(line);
    } catch (const json::exception& e) {  // a syntax error, or a number beyond a double (1e400)
      throw Error(detail::concat("scaling-report: ", s.path, " line ", line_number, ": not a JSON object (",
                                 e.what(), "); is this a dptrain metrics file?"));
    }
    DP_CHECK(record.is_object() && record.contains("event") && record["event"].is_string(), "scaling-report: ",
             s.path, " line ", line_number, ": a record without an \"event\": not a dptrain metrics file");
    const std::string event = record["event"].get<std::string>();
    if (event == "start") {
      started = true;
      segment_records = 0;
      s.model = string_at(record, "model");
      s.device = string_at(record, "device");
      s.precision = string_at(record, "precision", "fp32");
      s.grad_dtype = string_at(record, "grad_dtype", "fp32");
      const std::string where = detail::concat(s.path, " line ", line_number);
      s.ranks = count_at(record, "world_size", where).value_or(1);
      if (auto v = count_at(record, "nodes", where)) s.nodes = *v;
      if (auto v = count_at(record, "global_batch", where)) s.global_batch = *v;
      if (auto v = count_at(record, "per_rank_batch", where)) s.per_rank_batch = *v;
      if (string_at(record, "unit") == "sequences") text = true;
      continue;
    }
    DP_CHECK(started, "scaling-report: ", s.path, " line ", line_number, ": a '", event,
             "' record before any 'start' record: not a dptrain metrics file");
    if (event == "step") {
      ++s.records_total;
      const std::optional<double> rate = number_at(record, "samples_per_second");
      DP_CHECK(rate.has_value(), "scaling-report: ", s.path, " line ", line_number,
               ": a step record without samples_per_second");
      all_rates.push_back(*rate);
      const bool used = segment_records++ >= skip_records;
      if (used) rates.push_back(*rate);
      // Each window's phases, past the warm-up as the rates are (records since dptrain wrote them).
      if (const auto it = record.find("window_ms_per_step"); used && it != record.end() && it->is_object())
        for (const auto& [phase, ms] : it->items())
          if (ms.is_number()) window_phases[phase].push_back(ms.get<double>());
      if (const auto it = record.find("ms_per_step"); it != record.end() && it->is_object()) {
        s.phases_ms.clear();
        for (const auto& [phase, ms] : it->items())
          if (ms.is_number()) s.phases_ms[phase] = ms.get<double>();
      }
      if (const auto it = record.find("comm"); it != record.end()) last_step_comm = *it;
      if (auto v = number_at(record, "step")) s.steps = static_cast<int64_t>(*v);
    } else if (event == "epoch") {
      ++s.epochs;
      s.train_seconds += number_at(record, "seconds").value_or(0.0);
      if (auto v = number_at(record, "test_accuracy")) last_accuracy = v;
      if (const auto it = record.find("token_batching"); it != record.end() && it->is_object()) {
        text = true;
        tokens += number_at(*it, "tokens").value_or(0.0);
      }
    } else if (event == "evaluation") {
      if (auto v = number_at(record, "test_accuracy")) last_accuracy = v;
    } else if (event == "end") {
      s.end_reason = string_at(record, "reason");
      if (auto v = number_at(record, "steps")) s.steps = static_cast<int64_t>(*v);
      if (const auto it = record.find("comm"); it != record.end()) {
        s.comm_ms = s.exposed_ms = s.hidden_pct = std::nullopt;
        take_comm(*it, s);
        last_step_comm.reset();
      }
    }
  }
  DP_CHECK(started, "scaling-report: ", s.path, " has no 'start' record: not a dptrain metrics file");
  DP_CHECK(s.records_total > 0, "scaling-report: ", s.path, " has no step records (the run stopped before its first "
           "report: run it longer, or lower run.log_every)");
  if (last_step_comm) take_comm(*last_step_comm, s);  // no end record: the last report's
  // The step time by phase: the median window past the warm-up, like the throughput; files from
  // before the window figures keep the last record's epoch averages.
  if (!window_phases.empty()) {
    s.phases_ms.clear();
    for (const auto& [phase, values] : window_phases) s.phases_ms[phase] = median(values);
  }
  s.records_used = static_cast<int64_t>(rates.size());
  if (rates.empty()) rates = all_rates;  // every record a warm-up window: all there is (records_used 0 says so)
  s.throughput = median(rates);
  s.throughput_min = *std::min_element(rates.begin(), rates.end());
  s.throughput_max = *std::max_element(rates.begin(), rates.end());
  if (!s.per_rank_batch && s.global_batch && *s.global_batch % s.ranks == 0) s.per_rank_batch = *s.global_batch / s.ranks;
  s.accuracy = last_accuracy;
  if (text) {
    s.unit = "sequences";
    if (tokens > 0 && s.train_seconds > 0) s.tokens_per_second = tokens / s.train_seconds;
  }
  return s;
}

ScalingReport make_scaling_report(std::vector<RunSummary> runs, const std::string& baseline) {
  DP_CHECK(!runs.empty(), "scaling-report: no runs to compare");
  ScalingReport r;
  r.runs = std::move(runs);
  if (baseline.empty()) {
    for (size_t i = 1; i < r.runs.size(); ++i)
      if (r.runs[i].ranks < r.runs[r.baseline].ranks) r.baseline = i;
  } else {
    const auto it = std::find_if(r.runs.begin(), r.runs.end(), [&](const RunSummary& s) { return s.label == baseline; });
    DP_CHECK(it != r.runs.end(), "scaling-report: --baseline ", baseline, " is not one of the runs given");
    r.baseline = static_cast<size_t>(it - r.runs.begin());
  }
  const RunSummary& base = r.runs[r.baseline];
  DP_CHECK(base.throughput > 0, "scaling-report: the baseline ", base.label, " has a throughput of 0 ",
           base.unit, "/s: nothing to scale from");
  for (const RunSummary& s : r.runs) {
    const double speedup = s.throughput / base.throughput;
    r.speedup.push_back(speedup);
    r.efficiency.push_back(speedup * static_cast<double>(base.ranks) / static_cast<double>(s.ranks));
  }
  // Kind of study.
  std::set<int64_t> ranks, global, per_rank;
  bool batches_known = true;
  for (const RunSummary& s : r.runs) {
    ranks.insert(s.ranks);
    if (s.global_batch && s.per_rank_batch) {
      global.insert(*s.global_batch);
      per_rank.insert(*s.per_rank_batch);
    } else {
      batches_known = false;
    }
  }
  r.batches_known = batches_known;
  if (ranks.size() == 1)
    r.kind = "same size";
  else if (batches_known && global.size() == 1)
    r.kind = "strong";
  else if (batches_known && per_rank.size() == 1)
    r.kind = "weak";
  else
    r.kind = "mixed";
  if (r.kind == "mixed")
    r.warnings.push_back(batches_known ? "the runs' batches are neither one global batch (strong scaling) nor one "
                                         "batch per rank (weak scaling): the ratios compare different work per step"
                                       : "the batch is not known for every run (token batching, or a file from before "
                                         "dptrain recorded it): efficiency is a ratio of throughputs only");
  // Unlike runs.
  const auto differ = [&](const char* what, auto key) {
    std::set<std::string> values;
    for (const RunSummary& s : r.runs) values.insert(key(s));
    if (values.size() <= 1) return;
    std::string list;
    for (const std::string& v : values) list += (list.empty() ? "" : ", ") + (v.empty() ? "(unknown)" : v);
    r.warnings.push_back(detail::concat("the runs differ in ", what, " (", list, "): their ratios compare unlike runs"));
  };
  differ("model", [](const RunSummary& s) { return s.model; });
  differ("precision", [](const RunSummary& s) { return s.precision; });
  differ("device", [](const RunSummary& s) { return device_kind(s.device); });
  differ("gradient dtype on the wire", [](const RunSummary& s) { return s.grad_dtype; });
  for (const RunSummary& s : r.runs) {
    if (s.end_reason == "error")
      r.warnings.push_back(s.label + " ended with an error: its figures cover the steps before it");
    else if (s.end_reason.empty())
      r.warnings.push_back(s.label + " has no end record (still running, or killed): its figures are partial");
    if (s.records_used == 0)
      r.warnings.push_back(detail::concat(s.label, " has only ", s.records_total, " step record(s), all warm-up: its "
                                          "throughput includes the warm-up (run longer, or lower run.log_every)"));
  }
  return r;
}

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string optional_fixed(const std::optional<double>& v, int digits, const char* suffix = "") {
  return v && std::isfinite(*v) ? fixed(*v, digits) + suffix : "-";
}

// The wall time of a step: the global batch over the throughput; without a fixed batch, the
// phases' sum.
std::optional<double> step_ms(const RunSummary& s) {
  if (s.global_batch && s.throughput > 0) return 1000.0 * static_cast<double>(*s.global_batch) / s.throughput;
  if (s.phases_ms.empty()) return std::nullopt;
  double sum = 0;
  for (const auto& [phase, ms] : s.phases_ms) sum += ms;
  return sum;
}

std::optional<double> phase(const RunSummary& s, const char* name) {
  const auto it = s.phases_ms.find(name);
  if (it == s.phases_ms.end()) return std::nullopt;
  return it->second;
}

struct Column {
  std::string header;
  bool left = false;  // text: left-aligned
};

// The table's rows of cells (text), shared by every format but json.
std::pair<std::vector<Column>, std::vector<std::vector<std::string>>> cells(const ScalingReport& r) {
  const std::string unit = r.runs[r.baseline].unit;
  bool graph = false, tokens = false;
  for (const RunSummary& s : r.runs) {
    graph = graph || phase(s, "graph").value_or(0) > 0;
    tokens = tokens || s.tokens_per_second.has_value();
  }
  std::vector<Column> columns{{"run", true}, {"ranks"},   {"nodes"},      {"batch/rank"}, {unit + "/s"},
                              {"per rank"},  {"speedup"}, {"efficiency"}, {"step ms"},    {"data"},
                              {"forward"},   {"backward"}};
  if (graph) columns.push_back({"graph"});
  columns.insert(columns.end(), {{"comm exposed"}, {"optimizer"}, {"comm ms"}, {"hidden"}});
  if (tokens) columns.push_back({"tokens/s"});
  columns.insert(columns.end(), {{"accuracy"}, {"train s"}});
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < r.runs.size(); ++i) {
    const RunSummary& s = r.runs[i];
    std::vector<std::string> row{
        s.label + (i == r.baseline ? " (baseline)" : ""),
        std::to_string(s.ranks),
        s.nodes ? std::to_string(*s.nodes) : "-",
        s.per_rank_batch ? std::to_string(*s.per_rank_batch) : "-",
        fixed(s.throughput, 1),
        fixed(s.throughput / static_cast<double>(s.ranks), 1),
        fixed(r.speedup[i], 2),
        fixed(100.0 * r.efficiency[i], 1) + " %",
        optional_fixed(step_ms(s), 2),
        optional_fixed(phase(s, "data"), 2),
        optional_fixed(phase(s, "forward"), 2),
        optional_fixed(phase(s, "backward"), 2)};
    if (graph) row.push_back(optional_fixed(phase(s, "graph"), 2));
    row.push_back(optional_fixed(phase(s, "comm"), 2));
    row.push_back(optional_fixed(phase(s, "optimizer"), 2));
    row.push_back(s.ranks > 1 ? optional_fixed(s.comm_ms, 2) : "-");
    row.push_back(s.ranks > 1 ? optional_fixed(s.hidden_pct, 1, " %") : "-");
    if (tokens) row.push_back(optional_fixed(s.tokens_per_second, 0));
    row.push_back(s.accuracy ? fixed(100.0 * *s.accuracy, 2) + " %" : "-");
    row.push_back(fixed(s.train_seconds, 1));
    rows.push_back(std::move(row));
  }
  return {columns, rows};
}

std::string headline(const ScalingReport& r) {
  const RunSummary& b = r.runs[r.baseline];
  std::ostringstream os;
  os << "scaling report (dptrain " << kDptrainVersion << "): " << (b.model.empty() ? "?" : b.model) << ", "
     << b.precision << ", " << device_kind(b.device) << "; ";
  if (r.kind == "strong")
    os << "strong scaling: global batch " << *b.global_batch << " in every run";
  else if (r.kind == "weak")
    os << "weak scaling: batch " << *b.per_rank_batch << " per rank in every run";
  else if (r.kind == "same size")
    os << "every run on " << b.ranks << (b.ranks == 1 ? " rank" : " ranks");
  else if (r.batches_known)
    os << "batches differ between runs";
  else
    os << "batches not known for every run";
  os << "; baseline " << b.label << " (" << b.ranks << (b.ranks == 1 ? " rank" : " ranks") << ")";
  return os.str();
}

std::string footnote(const ScalingReport& r) {
  std::ostringstream os;
  const std::string unit = r.runs[r.baseline].unit;
  os << unit << "/s: median over each run's step records after its warm-up ones; efficiency = speedup / (ranks /\n"
     << "baseline ranks); step ms = global batch / throughput; data ... optimizer: ms per step from the last step\n"
     << "record (comm exposed: the step's wait for communication); comm ms: the communication's span per step,\n"
     << "hidden: its share behind backward (docs/scaling.md)\n";
  for (const std::string& w : r.warnings) os << "warning: " << w << "\n";
  return os.str();
}

std::string csv_cell(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

json optional_json(const std::optional<double>& v) { return v && std::isfinite(*v) ? json(*v) : json(nullptr); }

}  // namespace

std::string render_scaling_report(const ScalingReport& r, const std::string& format) {
  if (format == "json") {
    json runs = json::array();
    for (size_t i = 0; i < r.runs.size(); ++i) {
      const RunSummary& s = r.runs[i];
      json phases = json::object();
      for (const auto& [name, ms] : s.phases_ms) phases[name] = ms;
      runs.push_back({{"run", s.label},
                      {"metrics_file", s.path},
                      {"model", s.model},
                      {"device", s.device},
                      {"precision", s.precision},
                      {"ranks", s.ranks},
                      {"nodes", s.nodes ? json(*s.nodes) : json(nullptr)},
                      {"global_batch", s.global_batch ? json(*s.global_batch) : json(nullptr)},
                      {"per_rank_batch", s.per_rank_batch ? json(*s.per_rank_batch) : json(nullptr)},
                      {"unit", s.unit},
                      {"throughput", s.throughput},
                      {"throughput_min", s.throughput_min},
                      {"throughput_max", s.throughput_max},
                      {"records_used", s.records_used},
                      {"speedup", r.speedup[i]},
                      {"efficiency", r.efficiency[i]},
                      {"step_ms", optional_json(step_ms(s))},
                      {"ms_per_step", phases},
                      {"comm_ms", optional_json(s.comm_ms)},
                      {"exposed_ms", optional_json(s.exposed_ms)},
                      {"hidden_pct", optional_json(s.hidden_pct)},
                      {"tokens_per_second", optional_json(s.tokens_per_second)},
                      {"accuracy", optional_json(s.accuracy)},
                      {"train_seconds", s.train_seconds},
                      {"epochs", s.epochs},
                      {"steps", s.steps},
                      {"end_reason", s.end_reason}});
    }
    const json out = {{"kind", r.kind},
                      {"baseline", r.runs[r.baseline].label},
                      {"warnings", r.warnings},
                      {"runs", runs}};
    return out.dump(2) + "\n";
  }
  const auto [columns, rows] = cells(r);
  std::ostringstream os;
  if (format == "csv") {
    for (size_t c = 0; c < columns.size(); ++c) os << (c ? "," : "") << csv_cell(columns[c].header);
    os << "\n";
    for (const auto& row : rows) {
      for (size_t c = 0; c < row.size(); ++c) os << (c ? "," : "") << csv_cell(row[c]);
      os << "\n";
    }
    return os.str();
  }
  os << headline(r) << "\n\n";
  if (format == "markdown") {
    for (const Column& c : columns) os << "| " << c.header << " ";
    os << "|\n";
    for (const Column& c : columns) os << (c.left ? "| --- " : "| ---: ");
    os << "|\n";
    for (const auto& row : rows) {
      for (const std::string& cell : row) os << "| " << cell << " ";
      os << "|\n";
    }
  } else {
    DP_CHECK(format == "table", "scaling-report: --format ", format, ": expected table, markdown, csv or json");
    std::vector<size_t> width(columns.size());
    for (size_t c = 0; c < columns.size(); ++c) {
      width[c] = columns[c].header.size();
      for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
    }
    const auto put = [&](size_t c, const std::string& text) {
      const std::string pad(width[c] - text.size(), ' ');
      os << (c ? "  " : "") << (columns[c].left ? text + pad : pad + text);
    };
    for (size_t c = 0; c < columns.size(); ++c) put(c, columns[c].header);
    os << "\n";
    for (const auto& row : rows) {
      for (size_t c = 0; c < row.size(); ++c) put(c, row[c]);
      os << "\n";
    }
  }
  os << "\n" << footnote(r);
  return os.str();
}

int run_scaling_report(const ScalingReportArgs& args, std::FILE* out, std::FILE* err) {
  try {
    std::vector<RunSummary> runs;
    for (const std::string& run : args.runs) runs.push_back(summarize_run(run, args.skip_records));
    const std::string text = render_scaling_report(make_scaling_report(std::move(runs), args.baseline), args.format);
    std::fputs(text.c_str(), out);
    return 0;
  } catch (const Error& e) {
    std::fprintf(err, "dptrain: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace dp

// Human-readable output. On a terminal the current epoch's progress is one line redrawn in
// place; otherwise (a log file, srun output) each progress report is a line of its own. The
// trainer decides when to report (every run.log_every steps, more often on a terminal).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace dp {

struct StepStatus {
  int64_t epoch = 0, epochs = 0;  // 1-based epoch
  int64_t step = 0, steps = 0;    // 1-based step within the epoch
  double loss = 0;                // mean over the steps since the last report
  double samples_per_second = 0;
  const char* sample_unit = "samples";  // "sequences" for text
  double lr = 0;
};

class Console {
 public:
  // out == nullptr: a silent console (every rank but 0 of a distributed run).
  Console(std::FILE* out, bool is_terminal);
  // True when `out` is a terminal.
  static bool is_terminal(std::FILE* out);

  bool terminal() const { return tty_; }
  void step(const StepStatus& s);
  // A whole line (ends any progress line first).
  void line(const std::string& text);

 private:
  std::FILE* out_;
  bool tty_;
  bool progress_open_ = false;
};

}  // namespace dp

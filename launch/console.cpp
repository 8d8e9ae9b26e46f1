#include "launch/console.h"

#include <unistd.h>

namespace dp {

Console::Console(std::FILE* out, bool is_terminal) : out_(out), tty_(is_terminal) {}

bool Console::is_terminal(std::FILE* out) { return isatty(fileno(out)) == 1; }

void Console::step(const StepStatus& s) {
  if (!out_) return;
  char text[256];
  std::snprintf(text, sizeof text, "epoch %lld/%lld  step %lld/%lld  loss %.4f  lr %.4g  %.0f %s/s", static_cast<long long>(s.epoch),
                static_cast<long long>(s.epochs), static_cast<long long>(s.step), static_cast<long long>(s.steps), s.loss, s.lr,
                s.samples_per_second, s.sample_unit);
  if (tty_) {
    const int width = 24;
    const int filled = s.steps > 0 ? static_cast<int>(width * s.step / s.steps) : width;
    std::string bar(filled, '=');
    bar.resize(width, ' ');
    std::fprintf(out_, "\r\033[K[%s] %s", bar.c_str(), text);
    progress_open_ = true;
  } else {
    std::fprintf(out_, "%s\n", text);
  }
  std::fflush(out_);
}

void Console::line(const std::string& text) {
  if (!out_) return;
  if (progress_open_) {
    std::fputc('\n', out_);
    progress_open_ = false;
  }
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
}

}  // namespace dp

// Running a program the way a user would (through the shell) and capturing what it printed.
#pragma once

#include <filesystem>
#include <string>

namespace dp::testing {

struct ProgramResult {
  int exit_code = -1;  // 128 + signal when killed by one
  std::string output;  // stdout and stderr together
};

// Runs `command` with /bin/sh, stderr merged into stdout.
ProgramResult run_program(const std::string& command);

// Starts `launch` in the background, waits (up to a minute) for a step record in `metrics`,
// sends `signal` ("TERM", "INT", ...) to `targets` (the launched process: "$p"), and returns
// what the launch exited with.
ProgramResult signalled_run(const std::string& launch, const std::filesystem::path& metrics, const std::string& signal,
                            const std::string& targets = "$p");

// "timeout 300 mpirun ... -np <ranks> ": Open MPI as CI runs it (as root, more ranks than cores,
// a hard time limit), ready for a program and its arguments.
std::string mpirun(int ranks);

// The dptrain binary of this build tree, or $DPTRAIN_BINARY when set (the GPU bundle's `launch`
// step points it at the carried dptrain, which the build tree's path does not reach there).
std::string dptrain_binary();

// The 16 hex digits after "model digest " in dptrain's end line; empty when absent.
std::string model_digest(const std::string& output);

// The first "test accuracy 83.15 %" in dptrain's output as 83.15; -1 when absent.
double test_accuracy(const std::string& output);

// The whole file as text; empty when it cannot be read (the caller's expectations then fail).
std::string read_text_file(const std::filesystem::path& path);

// A fresh directory <tmp>/<prefix>_<pid>_<current test's name>, created; the caller removes it.
std::filesystem::path make_test_dir(const std::string& prefix);

}  // namespace dp::testing

#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, a standalone project: tests/fuzz/CMakeLists.txt) and fuzzes
# each from its seed corpus.
#   tests/fuzz/run_fuzzers.sh [SECONDS]       each target for SECONDS (default 60)
#   tests/fuzz/run_fuzzers.sh --runs N        each target for N executions (also: -runs=N)
#   FUZZ_TARGETS="fuzz_idx" tests/fuzz/run_fuzzers.sh 30
#   FUZZ_BUILD_DIR=/tmp/fz tests/fuzz/run_fuzzers.sh     (default: build-fuzz/ in the repository)
#   FUZZ_JOBS=1 ...                           compile jobs for the build (default: nproc)
# Fuzzing works on a copy of the seed corpus in a temporary folder (the repository's corpus is
# never written). Per target it prints executions, exec/s and the final corpus size, or, on a
# finding (crash, escaping exception, sanitizer report, timeout, out of memory), the exit status
# and the saved input (under <build>/findings/<target>/); any finding makes the exit status 1.
# Needs on Debian 12: clang libclang-rt-14-dev cmake ninja-build and the project's
# libyaml-cpp-dev zlib1g-dev nlohmann-json3-dev.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"

limit=(-max_total_time=60)
case "${1:-}" in
  "") ;;
  --runs) limit=(-runs="${2:?--runs needs a count}") ;;
  -runs=*) limit=("$1") ;;
  *[!0-9]*) echo "usage: $0 [SECONDS | --runs N]" >&2; exit 2 ;;
  *) limit=(-max_total_time="$1") ;;
esac
targets=(${FUZZ_TARGETS:-fuzz_config fuzz_idx fuzz_safetensors})
build=${FUZZ_BUILD_DIR:-build-fuzz}
# Longest input per target: a recipe with overrides, a few small IDX files, a safetensors header
# deep enough for corpus/safetensors/regression_deep_nesting.
declare -A max_len=([fuzz_config]=4096 [fuzz_idx]=8192 [fuzz_safetensors]=16384)

cxx=${CXX_FOR_FUZZING:-$(command -v clang++ || command -v clang++-14 || true)}
if [[ -z $cxx ]]; then
  echo "run_fuzzers: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
mkdir -p "$build"
if [[ ! -f $build/build.ninja ]]; then
  cmake -S tests/fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log" >&2; exit 2; }
fi
cmake --build "$build" -j "${FUZZ_JOBS:-$(nproc)}" >"$build/build.log" 2>&1 || { cat "$build/build.log" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for t in "${targets[@]}"; do
  [[ -x $build/$t ]] || { echo "run_fuzzers: no target '$t' in $build" >&2; exit 2; }
  corpus=$work/$t findings=$build/findings/$t log=$build/$t.log
  mkdir -p "$corpus" "$findings"
  cp tests/fuzz/corpus/"${t#fuzz_}"/* "$corpus"/
  dict=()
  [[ -f tests/fuzz/$t.dict ]] && dict=(-dict="tests/fuzz/$t.dict")
  cmd=("$build/$t" "$corpus" "${dict[@]}" "${limit[@]}" -max_len="${max_len[$t]:-4096}" -timeout=10
       -rss_limit_mb=2048 -malloc_limit_mb=1024 -artifact_prefix="$findings/" -print_final_stats=1)
  echo "run_fuzzers: $t: ${cmd[*]}" >"$log"
  set +e
  "${cmd[@]}" >>"$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  if ((rc != 0)); then
    saved=$(grep -o 'Test unit written to .*' "$log" | sed 's/Test unit written to //' | tr '\n' ' ')
    echo "run_fuzzers: $t: FINDING (exit status $rc) after ${runs} executions; input saved as ${saved:-(none)}; log $log" >&2
    grep -m 12 -E 'ERROR|runtime error|SUMMARY|fuzz_[a-z]+:|terminate|what\(\)' "$log" >&2 || true
    echo "  replay: $build/$t ${saved%% *}" >&2
    status=1
  else
    echo "run_fuzzers: $t: ${runs} executions (${speed}/s), 0 crashes, corpus $(ls "$corpus" | wc -l) inputs" \
         "($(cat "$corpus"/* | wc -c) bytes); log $log"
  fi
done
exit $status

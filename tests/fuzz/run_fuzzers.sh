#!/usr/bin/env bash
# Builds the libFuzzer targets (build-fuzz/, clang) and fuzzes each from its seed corpus.
#   tests/fuzz/run_fuzzers.sh [SECONDS]          each target for SECONDS (default 60)
#   tests/fuzz/run_fuzzers.sh --runs N           each target for N executions
#   FUZZ_TARGETS="fuzz_idx" tests/fuzz/run_fuzzers.sh 30
# Fuzzing works on a copy of the seed corpus in a temporary folder (the repository's corpus is
# never written); a crash input is kept under build-fuzz/findings/<target>/ and fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
limit=(-max_total_time="${1:-60}")
if [[ ${1:-} == --runs ]]; then limit=(-runs="${2:?--runs needs a count}"); fi
targets=(${FUZZ_TARGETS:-fuzz_config fuzz_idx fuzz_safetensors})
build=${FUZZ_BUILD_DIR:-build-fuzz}

cxx=$(command -v clang++ || command -v clang++-14 || true)
if [[ -z $cxx ]]; then
  echo "run_fuzzers: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
cmake -S tests/fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$build" -j "$(nproc)" >"$build/build.log" 2>&1 || { cat "$build/build.log" >&2; exit 2; }

declare -A max_len=([fuzz_config]=4096 [fuzz_idx]=8192 [fuzz_safetensors]=8192)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for t in "${targets[@]}"; do
  corpus=$work/$t findings=$build/findings/$t
  mkdir -p "$corpus" "$findings"
  cp tests/fuzz/corpus/"${t#fuzz_}"/* "$corpus"/
  dict=()
  [[ -f tests/fuzz/$t.dict ]] && dict=(-dict="tests/fuzz/$t.dict")
  log=$build/$t.log
  set +e
  "$build/$t" "$corpus" "${dict[@]}" "${limit[@]}" -max_len="${max_len[$t]:-4096}" -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=1024 -artifact_prefix="$findings/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  if ((rc != 0)); then
    echo "run_fuzzers: $t: FINDING after $runs executions (exit $rc); input in $findings/, log $log" >&2
    grep -m 20 -E 'ERROR|runtime error|SUMMARY|==[0-9]+==|terminate|abort' "$log" >&2 || true
    status=1
  else
    echo "run_fuzzers: $t: $runs executions ($speed/s), 0 crashes, corpus $(ls "$corpus" | wc -l) inputs"
  fi
done
exit $status

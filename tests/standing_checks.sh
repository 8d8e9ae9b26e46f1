#!/usr/bin/env bash
# The standing checks that run after the test suite (README's test command, CI):
#   1. the whole suite under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/),
#   2. the comm and data-loader tests under ThreadSanitizer (build-tsan/),
#   3. a short run of each libFuzzer target from its seed corpus (build-fuzz/).
# Each step stops the script on its first finding. FUZZ_SECONDS sets the fuzzing time per target.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
bash tests/sanitizers/run.sh address
bash tests/sanitizers/run.sh thread
bash tests/fuzz/run_fuzzers.sh "${FUZZ_SECONDS:-30}"
echo "standing checks: all clean in $((SECONDS - start)) s"

#!/usr/bin/env bash
# Build the GPU test programs here, run them on the lent GPU machine. See bench/gpu/README.md.
#
#   bench/gpu/run_on_device.sh build          # here (CPU machine): build + bundle
#   bench/gpu/run_on_device.sh test [ARGS]    # there (device tool, carry build-device/bundle.tar.gz)
#
# The GPU machine has the CUDA driver, nvcc, cuBLAS (toolkit or pip wheels) but none of our Debian
# libraries, so `build` packs the test binaries with every shared library they load except the
# NVIDIA ones (libcuda, cuBLAS/cuBLASLt, cuDNN, NCCL: large, and present there), glibc and its
# loader included. `test` runs the binaries through that loader, so they see exactly the
# userspace they were linked against whatever the machine's distribution is; only the NVIDIA
# libraries come from the machine, found and checked with the loader's own trace before running.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-device}"
BUNDLE="$BUILD_DIR/bundle.tar.gz"
TARGETS="${TARGETS:-runtime_tests}"             # test programs to build and carry
CARRY_LIMIT_BYTES=$((64 * 1024 * 1024))         # the device tool carries 64 MiB in all
# Provided by the GPU machine, never carried (matched on the library file name).
NVIDIA_LIBS_RE='^(libcuda\.so|libcublas\.so|libcublasLt\.so|libcudnn|libnccl|libnvidia-)'

die() { echo "run_on_device.sh: $*" >&2; exit 1; }

# ---- build (here) ------------------------------------------------------------------------------
build() {
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPTRAIN_WITH_CUDA=ON \
    -DDPTRAIN_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DDPTRAIN_CPU_ARCH="${DPTRAIN_CPU_ARCH:-x86-64-v4}" >/dev/null
  # shellcheck disable=SC2086
  ninja -C "$BUILD_DIR" -j"${JOBS:-2}" $TARGETS

  local stage="$BUILD_DIR/bundle"
  rm -rf "$stage" "$BUNDLE"
  mkdir -p "$stage/bin" "$stage/lib"
  local target lib name
  for target in $TARGETS; do
    cp "$BUILD_DIR/tests/$target" "$stage/bin/"
    # ldd lines: "libx.so.1 => /path/libx.so.1 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)".
    while read -r lib; do
      name="$(basename "$lib")"
      [[ "$name" =~ $NVIDIA_LIBS_RE ]] && continue
      [[ -e "$stage/lib/$name" ]] || cp -L "$lib" "$stage/lib/$name"
    done < <(ldd "$BUILD_DIR/tests/$target" | awk '/=> \// {print $3} /^[ \t]*\/.*ld-linux/ {print $1}')
    if ldd "$BUILD_DIR/tests/$target" | grep -q "not found"; then
      die "$target has unresolved libraries here: $(ldd "$BUILD_DIR/tests/$target" | grep 'not found')"
    fi
  done
  [[ -e "$stage/lib/ld-linux-x86-64.so.2" ]] || die "the dynamic loader was not found in ldd's output"
  {
    echo "built: $(date -u +%FT%TZ) on $(hostname)"
    echo "source_dir: $ROOT"
    echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown) (plus uncommitted work)"
    echo "cpu_arch: ${DPTRAIN_CPU_ARCH:-x86-64-v4}"
    echo "targets: $TARGETS"
    echo "libs: $(cd "$stage/lib" && ls | tr '\n' ' ')"
  } >"$stage/MANIFEST.txt"
  tar -C "$BUILD_DIR" -czf "$BUNDLE" bundle
  local bytes
  bytes=$(stat -c %s "$BUNDLE")
  ((bytes < CARRY_LIMIT_BYTES)) || die "$BUNDLE is $bytes bytes, over the device tool's 64 MiB carry limit"
  echo "bundle: ${BUNDLE#"$ROOT"/} ($((bytes / 1024 / 1024)) MiB): $(cd "$stage/bin" && ls | tr '\n' ' ')"
  echo "next: run the device tool with"
  echo "  command: bench/gpu/run_on_device.sh test"
  echo "  carry:   [\"${BUNDLE#"$ROOT"/}\"]"
}

# ---- test (there) ------------------------------------------------------------------------------

# Directories that may hold the machine's NVIDIA libraries: the toolkit, the driver's usual
# places, and the lib folders of pip's nvidia-* wheels (PyTorch's dependencies).
nvidia_lib_dirs() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu \
           /usr/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [[ -d "$d" ]] && echo "$d"
  done
  if command -v python3 >/dev/null; then
    local site
    for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
      [[ -d "$site/nvidia" ]] && find "$site/nvidia" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u
    done
  fi
  ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / {print $NF}' | xargs -r -n1 dirname
  return 0
}

test_on_device() {
  [[ -f "$BUNDLE" ]] || die "$BUNDLE is missing: run 'bench/gpu/run_on_device.sh build' on the CPU machine and carry it"
  local out="${OUT:-$BUILD_DIR/results}"
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$out/gpu.txt" || true

  local work
  work="$(mktemp -d)"
  tar -C "$work" -xzf "$BUNDLE"
  local bundle="$work/bundle"
  cat "$bundle/MANIFEST.txt"
  if grep -q '^cpu_arch: x86-64-v4' "$bundle/MANIFEST.txt" && ! grep -qw avx512f /proc/cpuinfo; then
    die "this CPU lacks AVX-512 but the bundle was built for x86-64-v4: rebuild with DPTRAIN_CPU_ARCH=x86-64-v3"
  fi
  # Tests that read fixtures use the source path baked in at build time: point it at this tree.
  local source_dir
  source_dir="$(awk '/^source_dir:/ {print $2}' "$bundle/MANIFEST.txt")"
  if [[ -n "$source_dir" && ! -e "$source_dir" ]]; then
    mkdir -p "$(dirname "$source_dir")" && ln -s "$ROOT" "$source_dir"
  fi

  # The carried libraries first, then the machine's NVIDIA ones (and its own LD_LIBRARY_PATH, which
  # --library-path replaces).
  local path="$bundle/lib"
  local d
  while read -r d; do path="$path:$d"; done < <(nvidia_lib_dirs | awk '!seen[$0]++')
  [[ -n "${LD_LIBRARY_PATH:-}" ]] && path="$path:$LD_LIBRARY_PATH"
  local loader="$bundle/lib/ld-linux-x86-64.so.2"
  run_carried() { "$loader" --library-path "$path" "$@"; }

  local status=0 bin name trace
  for bin in "$bundle"/bin/*; do
    name="$(basename "$bin")"
    # The loader's own trace, i.e. exactly what the run below will load.
    trace="$(LD_TRACE_LOADED_OBJECTS=1 "$loader" --library-path "$path" "$bin" 2>&1 || true)"
    echo "$trace" >"$out/$name.libs.txt"
    if grep -q "not found" <<<"$trace"; then
      echo "$trace" | grep "not found" >&2
      die "$name: libraries missing on this machine (searched: $path)"
    fi
    echo "== $name: NVIDIA libraries from this machine:"
    grep -E 'libcublas|libcudnn|libnccl' <<<"$trace" | sed 's/^/   /' || true
    echo "== $name ${*:---gtest_filter=Cuda*}"
    if run_carried "$bin" --gtest_output="xml:$out/$name.xml" "${@:---gtest_filter=Cuda*}" 2>&1 | tee "$out/$name.log"; then
      :
    else
      status=1
    fi
    # A test that was skipped on a GPU machine would mean the GPU was not seen: make it loud.
    if grep -q '^\[  SKIPPED \]' "$out/$name.log"; then
      echo "WARNING: $name skipped tests on the GPU machine:" >&2
      grep '^\[  SKIPPED \]' "$out/$name.log" >&2
      status=1
    fi
  done
  echo "== summary (logs and gtest XML in $out)"
  grep -hE '^\[==========\]|^\[  PASSED  \]|^\[  FAILED  \] |^\[  SKIPPED \] [0-9]+ tests?,' "$out"/*.log || true
  rm -rf "$work"
  return "$status"
}

case "${1:-}" in
  build) build ;;
  test) shift; test_on_device "$@" ;;
  *) die "usage: $0 build | test [gtest arguments, default --gtest_filter=Cuda*]" ;;
esac

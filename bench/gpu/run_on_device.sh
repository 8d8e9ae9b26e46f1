#!/usr/bin/env bash
# Build the GPU programs here, prove them on the lent GPU machine in one call. See bench/gpu/README.md.
#
#   bench/gpu/run_on_device.sh build          # here (CPU machine): build + bundle (+ MPI check)
#   bench/gpu/run_on_device.sh prove          # there, one device call: facts, CUDA and NCCL tests,
#                                             # training, benchmarks vs PyTorch, memcheck; packs $OUT
#   bench/gpu/run_on_device.sh test [ARGS]    # there: only the gtest programs, ARGS to each
#   bench/gpu/run_on_device.sh check-mpi      # here: the carried NCCL test program starts with
#                                             # the carried Open MPI alone (scrubbed environment)
#
# The GPU machine has the CUDA driver and the NVIDIA libraries (toolkit or pip wheels) but none of
# our Debian libraries, so `build` packs the programs with every shared library they load except
# the NVIDIA ones (libcuda, cuBLAS/cuBLASLt, cuDNN, NCCL: large, and present there), glibc and its
# loader included, plus Open MPI's plugins and help files (comm_nccl_tests calls MPI_Init), the
# Fashion-MNIST files and configs/. The programs run through the carried loader, so they see
# exactly the userspace they were linked against whatever the machine's distribution is; only the
# NVIDIA libraries come from the machine, found and checked with the loader's own trace.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
GPU_DIR="$ROOT/bench/gpu"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-device}"
BUNDLE="$BUILD_DIR/bundle.tar.xz"
# Programs to build and carry (CMake targets).
TARGETS="${TARGETS:-runtime_tests comm_nccl_tests launch_tests dptrain train_step_bench bert_step_bench batch_norm_probe cudnn_fusion_probe}"
CARRY_LIMIT_BYTES=$((64 * 1024 * 1024))         # the device tool carries 64 MiB in all
DATASET_DIR="${DATASET_DIR:-/usr/share/datasets/fashion-mnist}"
# Provided by the GPU machine, never carried (matched on the library file name).
NVIDIA_LIBS_RE='^(libcuda\.so|libcublas\.so|libcublasLt\.so|libcudnn|libnccl|libnvidia-)'
# Open MPI plugins not carried: the network transports for clusters (UCX, libfabric, PSM,
# InfiniBand verbs, netlink), useless to one process and 6 MB of libraries. Open MPI simply does
# not see a component that is absent.
OMPI_SKIP_PLUGIN_DEPS_RE='libfabric|libucp|libucs|libuct|libucm|libpsm|libibverbs|librdmacm|libefa|libnl-|libinfinipath|libmca_common_(ucx|ofi|verbs)'

die() { echo "run_on_device.sh: $*" >&2; exit 1; }
warn() { echo "run_on_device.sh: WARNING: $*" >&2; }

# ---- build (here) ------------------------------------------------------------------------------

# The executable a CMake target produced, "" when it was not built.
target_file() {
  find "$BUILD_DIR" -maxdepth 3 -type f -name "$1" -perm -u+x 2>/dev/null | head -1
}

# Copies every non-NVIDIA library that ldd lists for $1 into $2 (glibc's loader included).
copy_libs() {
  local file="$1" dest="$2" lib name
  while read -r lib; do
    name="$(basename "$lib")"
    [[ "$name" =~ $NVIDIA_LIBS_RE ]] && continue
    [[ -e "$dest/$name" ]] || cp -L "$lib" "$dest/$name"
  done < <(ldd "$file" 2>/dev/null | awk '/=> \// {print $3} /^[ \t]*\/.*ld-linux/ {print $1}')
}

# Bytes of what the device tool sends besides carried paths: tracked and untracked-not-ignored files.
tree_bytes() {
  (cd "$ROOT" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
     xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
}

build() {
  local arch="${DPTRAIN_CPU_ARCH:-x86-64-v3}"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPTRAIN_WITH_CUDA=ON \
    -DDPTRAIN_BUILD_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DDPTRAIN_CPU_ARCH="$arch" >/dev/null
  grep -q 'comm_nccl_tests' "$BUILD_DIR/build.ninja" || warn "NCCL was not found: comm_nccl_tests is not built"
  local built=1
  # shellcheck disable=SC2086
  ninja -C "$BUILD_DIR" -j"${JOBS:-2}" -k 0 $TARGETS || built=0

  local stage="$BUILD_DIR/bundle"
  rm -rf "$stage"  # (the previous bundle.tar.xz stays until a new one replaces it)
  mkdir -p "$stage/bin" "$stage/lib" "$stage/data" "$stage/configs"
  local target file missing=""
  for target in $TARGETS; do
    file="$(target_file "$target")"
    # After a failed build, a program counts only if ninja has nothing left to do for it (an
    # older binary from an earlier build would not be what the sources say).
    if [[ -z "$file" ]] || { ((built == 0)) && ! ninja -C "$BUILD_DIR" -n "$target" 2>/dev/null | grep -q 'no work to do'; }; then
      missing="$missing $target"
      continue
    fi
    cp "$file" "$stage/bin/"
    copy_libs "$file" "$stage/lib"
    if ldd "$file" | grep -q "not found"; then
      die "$target has unresolved libraries here: $(ldd "$file" | grep 'not found')"
    fi
  done
  if [[ -n "$missing" ]]; then
    if [[ "${ALLOW_MISSING:-0}" != 1 ]]; then
      die "not built:$missing (the build failed: see above). ALLOW_MISSING=1 bundles what was built"
    fi
    warn "bundling without:$missing (ALLOW_MISSING=1); \`prove\` will report them as failures"
  fi
  [[ -e "$stage/lib/ld-linux-x86-64.so.2" ]] || die "the dynamic loader was not found in ldd's output"

  # Open MPI's run-time files, relocated by OPAL_PREFIX: the MCA plugins (pkglibdir) and the help
  # texts (pkgdatadir), at the same paths relative to the prefix, plus every library the plugins
  # load. MPI_Init of a singleton (no mpirun) with ess_singleton_isolated starts no orted.
  local ompi_prefix ompi_pkglib ompi_pkgdata rel plugin
  ompi_prefix="$(ompi_info --path prefix --parsable | sed 's/^path:prefix://')"
  ompi_pkglib="$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')"
  ompi_pkgdata="$(ompi_info --path pkgdatadir --parsable | sed 's/^path:pkgdatadir://')"
  [[ -d "$ompi_pkglib" && -d "$ompi_pkgdata" ]] || die "Open MPI's plugins or help files were not found"
  mkdir -p "$stage/openmpi/etc" "$stage/openmpi/hwloc-plugins" "$stage/empty-bin"
  rel="${ompi_pkgdata#"$ompi_prefix"/}"
  mkdir -p "$stage/openmpi/$(dirname "$rel")"
  cp -rL "$ompi_prefix/$rel" "$stage/openmpi/$rel"
  rel="${ompi_pkglib#"$ompi_prefix"/}"
  mkdir -p "$stage/openmpi/$rel"
  local skipped_plugins=""
  for plugin in "$ompi_pkglib"/*.so; do
    if ldd "$plugin" 2>/dev/null | grep -qE "$OMPI_SKIP_PLUGIN_DEPS_RE"; then
      skipped_plugins="$skipped_plugins $(basename "$plugin" .so)"
      continue
    fi
    cp -L "$plugin" "$stage/openmpi/$rel/"
    copy_libs "$plugin" "$stage/lib"
  done
  # Read instead of /etc/openmpi/openmpi-mca-params.conf (absent there, Debian's here).
  cat >"$stage/openmpi/etc/openmpi-mca-params.conf" <<'EOF'
# dptrain's carried Open MPI (bench/gpu/run_on_device.sh): one process, no mpirun, no orted.
ess_singleton_isolated = 1
pml = ob1
btl = self,vader
EOF

  # Carried uncompressed (the loader reads plain idx files too): xz packs the raw images into
  # 4 MiB less than Debian's gzip files, which xz cannot shrink further.
  local idx
  for idx in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    [[ -f "$DATASET_DIR/$idx.gz" ]] || die "$DATASET_DIR/$idx.gz is missing (Debian's dataset-fashion-mnist)"
    gzip -dc "$DATASET_DIR/$idx.gz" >"$stage/data/$idx" || die "could not decompress $DATASET_DIR/$idx.gz"
  done
  cp "$ROOT"/configs/*.yaml "$stage/configs/"
  # The BERT demo's shards (Debian's fortunes, as configs/bert_tiny.yaml says) for the packing step.
  if [[ -n "$(target_file dptrain)" ]]; then
    "$(target_file dptrain)" prepare-text --out "$stage/data/fortunes" >"$BUILD_DIR/prepare-text.log" 2>&1 ||
      die "dptrain prepare-text failed (Debian's fortunes corpus; launch/setup.sh installs it): $(tail -2 "$BUILD_DIR/prepare-text.log")"
  fi
  # The tree the bundle was built from: HEAD, and whether anything tracked or new differed from it.
  local dirty
  dirty=$(git -C "$ROOT" status --porcelain 2>/dev/null | head -1)
  {
    echo "built: $(date -u +%FT%TZ) on $(hostname)"
    echo "source_dir: $ROOT"
    echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)${dirty:+ (plus uncommitted work)}"
    echo "cpu_arch: $arch"
    echo "cuda: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo unknown), sm_90"
    echo "openmpi: $(ompi_info --version 2>/dev/null | head -1), prefix $ompi_prefix; plugins left out:$skipped_plugins"
    echo "programs: $(cd "$stage/bin" && ls | tr '\n' ' ')"
    echo "missing:${missing:- none}"
    echo "libs: $(cd "$stage/lib" && ls | tr '\n' ' ')"
  } >"$stage/MANIFEST.txt"
  # xz with a 64 MiB dictionary: the four programs each hold the same 17 MB of GPU code (the
  # .nv_fatbin of dptrain_runtime), which gzip's 32 KiB window cannot share but xz's can.
  echo "compressing the bundle (xz, one thread, about a minute) ..."
  tar -C "$BUILD_DIR" --sort=name -cf - bundle | xz -T1 -6 --lzma2=preset=6,dict=64MiB >"$BUNDLE.tmp"
  mv "$BUNDLE.tmp" "$BUNDLE"
  local bytes tree total
  bytes=$(stat -c %s "$BUNDLE")
  tree=$(tree_bytes)
  total=$((bytes + tree))
  echo "bundle: ${BUNDLE#"$ROOT"/} ($((bytes / 1024 / 1024)) MiB; with the working tree $((total / 1024 / 1024)) MiB of the 64 MiB the device tool carries)"
  echo "  programs: $(cd "$stage/bin" && ls | tr '\n' ' ')"
  ((total < CARRY_LIMIT_BYTES)) || die "bundle ($bytes bytes) + working tree ($tree bytes) is over the device tool's 64 MiB"
  ((total < CARRY_LIMIT_BYTES - 4 * 1024 * 1024)) || warn "less than 4 MiB left under the 64 MiB carry limit"
  if [[ -n "$(ls "$stage/bin" | grep -x comm_nccl_tests)" ]]; then check_mpi || die "check-mpi failed"; fi
  echo "next: the device tool's run with"
  echo "  command: bench/gpu/run_on_device.sh prove"
  echo "  carry:   [\"${BUNDLE#"$ROOT"/}\"]"
}

# ---- running carried programs (there, and here for the checks) ---------------------------------

# Directories that may hold the machine's NVIDIA libraries, in search order: the toolkit, the lib
# folders of pip's nvidia-* wheels (PyTorch's cuDNN 9 and NCCL 2), the driver's folders, and last
# the system folders (where an older libnccl.so.2 could sit: it must not win over pip's).
nvidia_lib_dirs() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d "$d" ]] && echo "$d"
  done
  if command -v python3 >/dev/null; then
    local site
    for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
      [[ -d "$site/nvidia" ]] && find "$site/nvidia" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u
    done
  fi
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [[ -d "$d" ]] && echo "$d"
  done
  ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / {print $NF}' | xargs -r -n1 dirname
  for d in /usr/lib/x86_64-linux-gnu /usr/lib64; do
    [[ -d "$d" ]] && echo "$d"
  done
  return 0
}

# Unpacks the bundle (once) and sets BUNDLE_ROOT, LOADER, LIBPATH, OMPI_ENV.
WORK=""
open_bundle() {
  [[ -n "$WORK" ]] && return 0
  [[ -f "$BUNDLE" ]] || die "$BUNDLE is missing: run 'bench/gpu/run_on_device.sh build' on the CPU machine and carry it"
  WORK="$(mktemp -d /tmp/dptrain-gpu.XXXXXX)"
  if command -v xz >/dev/null; then
    tar -C "$WORK" -xJf "$BUNDLE"
  else  # Python's lzma is always there
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$BUNDLE" "$WORK"
  fi
  BUNDLE_ROOT="$WORK/bundle"
  LOADER="$BUNDLE_ROOT/lib/ld-linux-x86-64.so.2"
  # The carried libraries first, then the machine's NVIDIA ones (and its own LD_LIBRARY_PATH,
  # which --library-path replaces).
  LIBPATH="$BUNDLE_ROOT/lib"
  local d
  while read -r d; do LIBPATH="$LIBPATH:$d"; done < <(nvidia_lib_dirs | awk '!seen[$0]++')
  [[ -n "${LD_LIBRARY_PATH:-}" ]] && LIBPATH="$LIBPATH:$LD_LIBRARY_PATH"
  # MPI_Init with the carried Open MPI alone: plugins and help texts from the bundle, the
  # parameters file from the bundle (not /etc/openmpi), no orted (singleton isolated), and no
  # hwloc plugins from the machine (they would load the machine's libraries into our glibc).
  OMPI_ENV=(OPAL_PREFIX="$BUNDLE_ROOT/openmpi" OMPI_MCA_ess_singleton_isolated=1
            OMPI_MCA_mca_base_param_files="$BUNDLE_ROOT/openmpi/etc/openmpi-mca-params.conf"
            HWLOC_PLUGINS_PATH="$BUNDLE_ROOT/openmpi/hwloc-plugins" OMPI_MCA_btl_vader_single_copy_mechanism=none)
  # Command prefixes (arrays, so that `timeout` can run them): a carried program, and one that
  # calls MPI_Init, in a scrubbed environment (nothing from the caller's, no mpirun/orted on PATH).
  CARRIED=("$LOADER" --library-path "$LIBPATH")
  MPI_CARRIED=(env -i PATH="$BUNDLE_ROOT/empty-bin" HOME="$WORK" TMPDIR=/tmp "${OMPI_ENV[@]}")
  [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]] && MPI_CARRIED+=(CUDA_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES")
  [[ -n "${NCCL_DEBUG:-}" ]] && MPI_CARRIED+=(NCCL_DEBUG="$NCCL_DEBUG")
  MPI_CARRIED+=("${CARRIED[@]}")
  # Tests that read fixtures use the source path baked in at build time: point it at this tree.
  local source_dir
  source_dir="$(awk '/^source_dir:/ {print $2}' "$BUNDLE_ROOT/MANIFEST.txt")"
  if [[ -n "$source_dir" && ! -e "$source_dir" ]]; then
    mkdir -p "$(dirname "$source_dir")" 2>/dev/null && ln -s "$ROOT" "$source_dir" 2>/dev/null || true
  fi
}
close_bundle() { [[ -n "$WORK" ]] && rm -rf "$WORK"; WORK=""; }

run_carried() { "$LOADER" --library-path "$LIBPATH" "$@"; }
# The loader's own trace, i.e. exactly what a run of $1 loads.
trace_carried() { LD_TRACE_LOADED_OBJECTS=1 "$LOADER" --library-path "$LIBPATH" "$1" 2>&1 || true; }
run_mpi_carried() { "${MPI_CARRIED[@]}" "$@"; }

# A copy of carried program $1 that starts by itself (no loader on the command line, no
# LD_LIBRARY_PATH): its interpreter is the carried loader copied to /tmp/dptrain-ld.so, and its
# DT_RPATH is /tmp/dptrain-lib, a folder of links to the carried libraries and the machine's NVIDIA
# ones in LIBPATH's order (elf_relocate.py). For tools that start the program themselves
# (compute-sanitizer, ncu) when they cannot start it through the loader. Prints the copy's path.
relocated_program() {
  local bin="$BUNDLE_ROOT/bin/$1" dir=/tmp/dptrain-relocated lib=/tmp/dptrain-lib d f name
  rm -rf "$lib" && mkdir -p "$dir" "$lib" || return 1
  cp "$LOADER" /tmp/dptrain-ld.so || return 1
  for d in ${LIBPATH//:/ }; do
    for f in "$d"/lib*.so*; do
      [[ -e "$f" ]] || continue
      name="$(basename "$f")"
      # From the system folders only the driver's libraries; the rest is found there anyway.
      case "$d" in /usr/lib/x86_64-linux-gnu|/usr/lib64) [[ "$name" =~ ^(libcuda\.so|libnvidia-) ]] || continue ;; esac
      [[ -e "$lib/$name" ]] || ln -s "$f" "$lib/$name"
    done
  done
  python3 "$GPU_DIR/elf_relocate.py" "$bin" "$dir/$1" --interp /tmp/dptrain-ld.so --rpath /tmp/dptrain-lib || return 1
  echo "$dir/$1"
}

# ---- check-mpi (here): the carried Open MPI is enough --------------------------------------------
# Runs the carried comm_nccl_tests as `prove` does (carried loader, env -i, PATH without mpirun,
# OPAL_PREFIX in the bundle) under strace, and fails if any file of this machine's Open MPI, PMIx
# or hwloc is opened, or a child process (orted) is started: then it would start on a machine
# without Open MPI. Without a GPU every GPU test skips.
check_mpi() {
  open_bundle
  local bin="$BUNDLE_ROOT/bin/comm_nccl_tests" log status=0 bad=0
  [[ -x "$bin" ]] || die "comm_nccl_tests is not in the bundle"
  log="$(mktemp)"
  echo "== check-mpi: comm_nccl_tests through the carried loader; env -i, PATH=<empty folder>, OPAL_PREFIX=<bundle>/openmpi"
  local strace_bin
  strace_bin="$(command -v strace || true)"
  if [[ -n "$strace_bin" ]]; then
    env -i PATH="$BUNDLE_ROOT/empty-bin" HOME="$WORK" TMPDIR=/tmp "${OMPI_ENV[@]}" \
      "$strace_bin" -f -qq -e trace=openat,open,execve -o "$log.strace" \
      "$LOADER" --library-path "$LIBPATH" "$bin" >"$log" 2>&1 || status=$?
  else
    "${MPI_CARRIED[@]}" "$bin" >"$log" 2>&1 || status=$?
  fi
  grep -E '^comm_nccl_tests:|^\[  (PASSED  |FAILED  |SKIPPED )\] [0-9]|^\[==========\]' "$log" | sed 's/^/   /'
  if [[ -f "$log.strace" ]]; then
    local outside execs
    outside="$(grep -v ENOENT "$log.strace" | grep -oE '"/[^"]*"' | tr -d '"' | sort -u |
               grep -E 'openmpi|/orted|/mpirun|/prterun|pmix|/hwloc' | grep -v "^$BUNDLE_ROOT/" || true)"
    execs="$(grep -c 'execve(' "$log.strace" || true)"
    if [[ -n "$outside" ]]; then
      echo "   files of this machine's Open MPI/PMIx/hwloc were opened (must be none):"
      echo "$outside" | sed 's/^/     /'
      bad=1
    else
      echo "   strace: no file of this machine's Open MPI, PMIx or hwloc was opened"
    fi
    if ((execs > 1)); then
      echo "   strace: a child process was started:"; grep 'execve(' "$log.strace" | sed 's/^/     /'; bad=1
    else
      echo "   strace: no child process (no orted): the only execve is the loader's"
    fi
  else
    echo "   (strace not found: ran without the open-file check)"
  fi
  if ((status != 0 || bad)) || ! grep -q '^\[==========\] [0-9]* tests\? from .* ran' "$log"; then
    echo "   check-mpi: FAILED (exit $status); the log:"
    tail -30 "$log" | sed 's/^/     /'
    rm -f "$log" "$log.strace"
    close_bundle
    return 1
  fi
  rm -f "$log" "$log.strace"
  close_bundle
  echo "   check-mpi: ok (MPI_Init ran on the carried Open MPI alone)"
}

# ---- test (there): the gtest programs only ---------------------------------------------------------
test_on_device() {
  open_bundle
  local out="${OUT:-$BUILD_DIR/results}" status=0 bin name trace
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$out/gpu.txt" || true
  cat "$BUNDLE_ROOT/MANIFEST.txt"
  for bin in "$BUNDLE_ROOT"/bin/*_tests; do
    name="$(basename "$bin")"
    trace="$(trace_carried "$bin")"
    echo "$trace" >"$out/$name.libs.txt"
    grep -q "not found" <<<"$trace" && { echo "$trace" | grep "not found" >&2; die "$name: libraries missing"; }
    echo "== $name ${*:-}"
    if [[ "$name" == comm_nccl_tests ]]; then
      run_mpi_carried "$bin" --gtest_output="xml:$out/$name.xml" "$@" 2>&1 | tee "$out/$name.log" || status=1
    else
      run_carried "$bin" --gtest_output="xml:$out/$name.xml" "$@" 2>&1 | tee "$out/$name.log" || status=1
    fi
    python3 "$GPU_DIR/gtest_verdict.py" "$out/$name.xml" --program "$name" \
      --expected-skips "$GPU_DIR/expected_skips.txt" || status=1
  done
  close_bundle
  return "$status"
}

# ---- prove (there): everything in one call ---------------------------------------------------------
#
# Steps, each with a time limit (and all within PROVE_BUDGET_S, so that packing always happens):
#   facts      GPU, driver, OS, glibc, CPU flags, the NVIDIA libraries the loader resolves + versions
#   cuda_tests runtime_tests, all of it (every CUDA suite whatever its name, the op harness's
#              CudaVsCpu cases, and the CPU tests on this CPU); a skip fails unless expected_skips.txt
#   nccl_tests comm_nccl_tests with one rank (MPI singleton on the carried Open MPI)
#              (NcclProcessGroup, and Shampoo's GPU state against its CPU Eigen run)
#   train      dptrain --config configs/fashion_mnist.yaml --set run.device=cuda: 3 epochs, ≥ 89.5 %;
#              then `dptrain evaluate` of its weights on the GPU: the run's digest and accuracy
#   nosync     100 steps (fp32; fp16 + clipping) with run.check_host_syncs: no host read inside a step
#   graphs     the train step's recipe with run.cuda_graphs (>= 89.5 %, steps replayed), 200 fp16
#              steps with loss scaling and clipping inside the graph, and an MLP with dropout eager
#              and graphed (the same model digest: replays draw the eager masks)
#   launch     launch_tests' GPU cases ($LAUNCH_FILTER): dptrain graphed against eager (losses, dropout
#              masks, fp16 loss scale and skips with clipping) and the step profiler's device timing;
#              they start the carried dptrain, relocated so that it starts by itself (DPTRAIN_BINARY)
#   shampoo    dptrain configs/fashion_mnist_shampoo.yaml on the GPU for 1 epoch (>= 87 %), Shampoo's
#              state and kernels on the GPU, its roots on the host; the optimiser phase's ms/step
#   bench      train_step_bench --device cuda --tf32 and torch_gpu_step.py, then the ratio table
#   rn50       ResNet-50 224x224 b128 channels-last in fp32/TF32, bf16 and fp16, both sides, its table,
#              and dptrain's steps again replayed as CUDA graphs (train_step_bench --cuda-graphs)
#   bert       bert_step_bench and bench/bert_reference.py --device cuda --precision bf16 (BERT tiny to
#              large, the large at sequence 512), then their ratio table
#   packing    dptrain configs/bert_tiny.yaml on the GPU in bf16: fixed batches, max_tokens, packed;
#              sequences/s and padding waste of each (issue 13's packing-vs-not on a GPU)
#   profile    ncu on one ResNet-50 b128 bf16 channels-last step, dptrain and PyTorch: time per kernel
#   memcheck   compute-sanitizer --tool memcheck on OpHarness/CudaVsCpu.*
#   bnorm      batch_norm_probe: dptrain's channels-last batch-norm kernels against cuDNN's persistent
#              NHWC batch norm (the Ex API PyTorch uses for fp16) at ResNet-50's 16 batch-norm shapes,
#              fp16 and bf16, with checks of cuDNN's results against dptrain's (issue 11's fp16 route)
#   fusion     cudnn_fusion_probe: which cuDNN graph-API fusions of convolution + batch norm run on this
#              GPU, timed against the plain convolutions (a measurement for issue 11; last: it gets
#              what is left of the budget, and stops itself within it)
# Exit: 0 all passed on a GPU; 1 a step failed; 3 no GPU was seen (nothing on a GPU was proven).
PROVE_BUDGET_S="${PROVE_BUDGET_S:-555}"
# The steps to run (all by default). A follow-up call in a session whose device time is short runs
# a few: e.g. PROVE_STEPS="cuda_tests rn50 profile" after a kernel change. facts always runs.
PROVE_ALL_STEPS="cuda_tests nccl_tests train nosync graphs launch shampoo bench rn50 bert packing profile memcheck bnorm fusion"
PROVE_STEPS="${PROVE_STEPS:-$PROVE_ALL_STEPS}"
STEP_LINES=()
STEP_FAILED=0
STEP_NOGPU=0
HAVE_GPU=0

# record NAME VERDICT SECONDS NOTE
record() {
  STEP_LINES+=("$(printf '%-11s %-8s %5ss  %s' "$1" "$2" "$3" "$4")")
  case "$2" in
    PASS) ;;
    NO-GPU) STEP_NOGPU=1 ;;
    *) STEP_FAILED=1 ;;
  esac
  echo "-- $1: $2 ($3 s) $4"
}

# Seconds a step may take: its cap, or what is left of the budget (less a reserve for packing).
limit_for() {
  local left=$((PROVE_BUDGET_S - SECONDS - 15))
  ((left < $1)) && echo "$left" || echo "$1"
}

# limited LOG CAP CMD...: runs CMD with a time limit, output to LOG; returns its status (124: timed out).
limited() {
  local log="$1" cap="$2" lim
  shift 2
  lim="$(limit_for "$cap")"
  if ((lim < 10)); then
    echo "not run: the time budget (PROVE_BUDGET_S=$PROVE_BUDGET_S) is spent" >"$log"
    return 125
  fi
  echo "+ timeout $lim $*" >"$log"
  timeout -k 10 "$lim" "$@" >>"$log" 2>&1
}

# verdict for a step that needs a GPU and failed: NO-GPU on the GPU-less machine, else FAIL/TIMEOUT.
fail_verdict() {
  local rc="$1"
  if ((HAVE_GPU == 0)); then echo NO-GPU
  elif ((rc == 124 || rc == 137)); then echo TIMEOUT
  elif ((rc == 125)); then echo NOT-RUN
  else echo FAIL
  fi
}

facts() {
  local f="$1/facts.txt"
  {
    echo "== nvidia-smi"
    timeout 20 nvidia-smi 2>&1 || echo "nvidia-smi: failed or absent"
    timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap --format=csv 2>&1 || true
    echo "== OS"
    uname -a
    grep -E '^(PRETTY_NAME|VERSION)=' /etc/os-release 2>/dev/null || true
    echo "machine glibc: $(ldd --version 2>/dev/null | head -1)"
    echo "carried glibc: $("$LOADER" --version 2>/dev/null | head -1)"
    echo "== CPU"
    grep -m1 'model name' /proc/cpuinfo || true
    echo "cores: $(nproc), memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
    local flag
    for flag in avx2 fma avx512f avx512bw avx512vl avx512dq avx512_bf16 amx_tile; do
      grep -qw "$flag" /proc/cpuinfo && echo "  $flag: yes" || echo "  $flag: no"
    done
    echo "bundle built for: $(awk '/^cpu_arch:/ {print $2}' "$BUNDLE_ROOT/MANIFEST.txt")"
    echo "== bundle"
    cat "$BUNDLE_ROOT/MANIFEST.txt"
    echo "== library search path (carried first)"
    echo "$LIBPATH" | tr ':' '\n' | sed 's/^/  /'
    echo "== libcuda.so.1 (the driver's, opened by cudart at run time)"
    ldconfig -p 2>/dev/null | grep 'libcuda\.so\.1 ' || echo "  not in ldconfig's cache"
    local d
    for d in ${LIBPATH//:/ }; do [[ -e "$d/libcuda.so.1" ]] && echo "  $d/libcuda.so.1 -> $(readlink -f "$d/libcuda.so.1")"; done
    echo "== NVIDIA libraries each program loads (the carried loader's trace)"
    local bin name
    for bin in "$BUNDLE_ROOT"/bin/*; do
      name="$(basename "$bin")"
      trace_carried "$bin" >"$1/$name.libs.txt"
      echo "$name:"
      grep -E 'libcudart|libcublas|libcudnn|libnccl|not found' "$1/$name.libs.txt" |
        awk '{print "  " $1 " => " $3}' || true
      # Anything else that did not come from the bundle (the NVIDIA libraries' own needs).
      grep '=>' "$1/$name.libs.txt" | grep -vE "$BUNDLE_ROOT/|libcudart|libcublas|libcudnn|libnccl" |
        awk '{print "  (from the machine) " $1 " => " $3}' || true
    done
    echo "== versions of the libraries resolved above (ctypes, machine python)"
    python3 - "$1"/*.libs.txt <<'PY' 2>&1 || true
import ctypes, os, re, sys
paths = {}
for f in sys.argv[1:]:
    for line in open(f):
        m = re.match(r"\s*(lib(cudart|cublas|cublasLt|cudnn|nccl)\.so[.\d]*) => (\S+)", line)
        if m and m.group(3) != "not":
            paths.setdefault(m.group(2), os.path.realpath(m.group(3)))
def ver(kind, path):
    lib = ctypes.CDLL(path)
    v = ctypes.c_int(0)
    if kind == "cudart":
        lib.cudaRuntimeGetVersion(ctypes.byref(v)); r = v.value
        d = ctypes.c_int(0); lib.cudaDriverGetVersion(ctypes.byref(d))
        return f"runtime {r // 1000}.{r % 1000 // 10}, driver API {d.value // 1000}.{d.value % 1000 // 10}"
    if kind in ("cublas", "cublasLt"):
        fn = lib.cublasLtGetVersion if kind == "cublasLt" else None
        if fn:
            fn.restype = ctypes.c_size_t; return str(fn())
        parts = []
        for p in range(3):
            lib.cublasGetProperty(p, ctypes.byref(v)); parts.append(str(v.value))
        return ".".join(parts)
    if kind == "cudnn":
        lib.cudnnGetVersion.restype = ctypes.c_size_t; return str(lib.cudnnGetVersion())
    if kind == "nccl":
        lib.ncclGetVersion(ctypes.byref(v)); return str(v.value)
for kind, path in sorted(paths.items()):
    try:
        print(f"  {kind}: {ver(kind, path)}  ({path})")
    except Exception as e:
        print(f"  {kind}: version unknown ({e})  ({path})")
PY
    echo "== PyTorch"
    timeout 60 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-", "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")' 2>&1 || true
    echo "== tools"
    echo "compute-sanitizer: $(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo absent)"
    echo "nvcc: $(command -v nvcc || echo absent) $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || true)"
  } >"$f" 2>&1
}

# One-line facts for the summary.
facts_brief() {
  local f="$1/facts.txt"
  local gpu
  gpu="$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  echo "gpu:      ${gpu:-none seen by nvidia-smi}"
  echo "os:       $(grep -m1 '^PRETTY_NAME=' /etc/os-release 2>/dev/null | cut -d= -f2 | tr -d '"'), $(uname -r)"
  echo "glibc:    machine $(ldd --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+$'), carried $("$LOADER" --version 2>/dev/null | head -1 | grep -oE 'version [0-9]+\.[0-9]+' | cut -d' ' -f2)"
  echo "cpu:      $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, avx512f $(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)"
  sed -n '/^== versions/,/^== PyTorch/p' "$f" | grep -E '^  (cudart|cublas|cublasLt|cudnn|nccl):' | sed 's/^  /lib:      /' || true
  grep -m1 '^torch ' "$f" | sed 's/^/torch:    /' || true
}

# gtest step: NAME PROGRAM CAP plain|mpi [gtest args...]
gtest_step() {
  local step="$1" prog="$2" cap="$3" kind="$4" t0=$SECONDS
  shift 4
  local bin="$BUNDLE_ROOT/bin/$prog" log="$STAGE/$prog.log" xml="$STAGE/xml/$prog.xml" rc=0 vrc=0 note
  if [[ ! -x "$bin" ]]; then record "$step" FAIL 0 "$prog is not in the bundle"; return; fi
  if grep -q "not found" "$STAGE/$prog.libs.txt" 2>/dev/null; then
    record "$step" FAIL 0 "$prog: libraries not found: $(grep 'not found' "$STAGE/$prog.libs.txt" | awk '{print $1}' | tr '\n' ' ')"
    return
  fi
  local runner=("${CARRIED[@]}")
  [[ "$kind" == mpi ]] && runner=("${MPI_CARRIED[@]}")
  limited "$log" "$cap" "${runner[@]}" "$bin" --gtest_output="xml:$xml" "$@" || rc=$?
  note="$(python3 "$GPU_DIR/gtest_verdict.py" "$xml" --program "$prog" --expected-skips "$GPU_DIR/expected_skips.txt" 2>&1)" || vrc=$?
  echo "$note" >"$STAGE/$prog.verdict.txt"
  echo "$note" | sed 's/^/   /'
  local first
  first="$(echo "$note" | head -1 | sed "s/^$prog: //")"
  if ((rc == 124 || rc == 137)); then record "$step" TIMEOUT $((SECONDS - t0)) "$prog: $first"
  elif ((rc == 125)); then record "$step" NOT-RUN $((SECONDS - t0)) "$prog: time budget spent"
  elif ((vrc == 1)); then record "$step" FAIL $((SECONDS - t0)) "$prog: $first"
  elif ((rc != 0)); then
    record "$step" FAIL $((SECONDS - t0)) "$prog: $first, but exit status $rc: $(tail -2 "$log" | tr '\n' ' ' | cut -c1-200)"
  elif ((vrc == 3)); then record "$step" NO-GPU $((SECONDS - t0)) "$prog: $first"
  else record "$step" PASS $((SECONDS - t0)) "$prog: $first"
  fi
}

# `dptrain evaluate` (NOTE [ Evaluating weights ]) of a training run's weights file on `device`:
# the digest must be the run's, the accuracy the run's last one within 0.05 points (a GPU
# evaluation may pick other convolution algorithms than the run did). Sets EVALUATE_NOTE; returns
# non-zero on a mismatch or an error. Arguments: dptrain, the training log, the weights, the
# run's accuracy, device, the evaluation's log.
evaluate_check() {
  local bin="$1" train_log="$2" weights="$3" acc="$4" device="$5" log="$6" rc=0 eacc edigest tdigest
  limited "$log" 60 "${CARRIED[@]}" "$bin" evaluate --config "$BUNDLE_ROOT/configs/fashion_mnist.yaml" \
    --set run.device="$device" --set data.root="$BUNDLE_ROOT/data" --weights "$weights" || rc=$?
  eacc="$(grep -oE 'test accuracy [0-9.]+' "$log" | tail -1 | awk '{print $3}')"
  edigest="$(grep -oE 'model digest [0-9a-f]{16}' "$log" | head -1 | awk '{print $3}')"
  tdigest="$(grep -oE 'model digest [0-9a-f]{16}' "$train_log" | tail -1 | awk '{print $3}')"
  EVALUATE_NOTE="evaluate on $device: ${eacc:-none} %, digest ${edigest:-none}"
  if ((rc != 0)); then
    EVALUATE_NOTE="$EVALUATE_NOTE, exit $rc: $(grep -m1 -E 'error' "$log" | cut -c1-160)"
    return 1
  fi
  if [[ -z "$eacc" || -z "$edigest" || "$edigest" != "$tdigest" ]] ||
    ! awk -v a="$eacc" -v b="$acc" 'BEGIN {d = a - b; exit !(d <= 0.05 && d >= -0.05)}'; then
    EVALUATE_NOTE="$EVALUATE_NOTE: differs from the run's ${acc:-none} %, digest ${tdigest:-none}"
    return 1
  fi
}

train_step() {
  local t0=$SECONDS rc=0 log="$STAGE/train.log" bin="$BUNDLE_ROOT/bin/dptrain"
  if [[ ! -x "$bin" ]]; then record train FAIL 0 "dptrain is not in the bundle"; return; fi
  limited "$log" 240 "${CARRIED[@]}" "$bin" --config "$BUNDLE_ROOT/configs/fashion_mnist.yaml" \
    --set run.device=cuda --set data.root="$BUNDLE_ROOT/data" --set run.output_dir="$STAGE/train_run" || rc=$?
  local epochs acc
  epochs="$(grep -cE '^epoch [0-9]+/[0-9]+: ' "$log" || true)"
  acc="$(grep -E '^epoch [0-9]+/[0-9]+: ' "$log" | tail -1 | grep -oE 'test accuracy [0-9.]+' | awk '{print $3}')"
  grep -E '^epoch [0-9]+/[0-9]+: |^  step time|^done:|error' "$log" | sed 's/^/   /' | head -20
  local note="epochs done: ${epochs:-0}, final test accuracy ${acc:-none} % (needs 3 epochs, >= 89.5 %)"
  local evaluated=1
  if ((rc == 0)); then
    evaluate_check "$bin" "$log" "$STAGE/train_run/model.safetensors" "$acc" cuda "$STAGE/evaluate.log" || evaluated=0
    note="$note; $EVALUATE_NOTE"
  fi
  if ((rc == 0 && evaluated)) && [[ "$epochs" == 3 && -n "$acc" ]] && awk -v a="$acc" 'BEGIN {exit !(a >= 89.5)}'; then
    record train PASS $((SECONDS - t0)) "$note"
  elif ((rc == 0)); then
    record train FAIL $((SECONDS - t0)) "$note"
  else
    record train "$(fail_verdict "$rc")" $((SECONDS - t0)) "$note; exit $rc: $(grep -m1 -E 'error' "$log" | cut -c1-200)"
  fi
}

# No host read inside a training step on the GPU (run.check_host_syncs, NOTE [ Host-sync checking ]):
# 100 SmallCNN steps in float32, and in fp16 with loss scaling and clipping (the scaler's and the
# clip's scalars on the device). A read inside a step ends the run naming it.
nosync_step() {
  local t0=$SECONDS rc=0 bin="$BUNDLE_ROOT/bin/dptrain" log="$STAGE/nosync.log" failed=""
  if [[ ! -x "$bin" ]]; then record nosync FAIL 0 "dptrain is not in the bundle"; return; fi
  : >"$log"
  local variant extra
  for variant in fp32 fp16_clipped; do
    extra=()
    [[ $variant == fp16_clipped ]] && extra=(--set run.precision=fp16 --set optimizer.clip_grad_norm=1.0)
    limited "$STAGE/nosync_$variant.log" 60 "${CARRIED[@]}" "$bin" --config "$BUNDLE_ROOT/configs/fashion_mnist.yaml" \
      --set run.device=cuda --set data.root="$BUNDLE_ROOT/data" --set run.check_host_syncs=true \
      --set run.max_steps=100 --set run.output_dir="$STAGE/nosync_$variant" "${extra[@]}" || { rc=$?; failed+=" $variant"; }
    cat "$STAGE/nosync_$variant.log" >>"$log"; rm -f "$STAGE/nosync_$variant.log"
  done
  grep -E '^done:|error' "$log" | sed 's/^/   /' | head -6
  if ((rc == 0)); then record nosync PASS $((SECONDS - t0)) "100 steps fp32 and fp16+clipping under run.check_host_syncs"
  else record nosync "$(fail_verdict "$rc")" $((SECONDS - t0)) "failed:$failed: $(grep -m1 -E 'error' "$log" | cut -c1-200)"
  fi
}

# The default recipe with every step after the warm-up replayed as one CUDA graph (run.cuda_graphs,
# NOTE [ CUDA graphs ]): 3 epochs must reach what eager training reaches (>= 89.5 %), with most
# steps replayed; then 200 fp16 steps with loss scaling and clipping (the scaler's update and the
# clip factor inside the graph) under run.check_host_syncs.
graphs_step() {
  local t0=$SECONDS rc=0 rc16=0 bin="$BUNDLE_ROOT/bin/dptrain" log="$STAGE/graphs.log" log16="$STAGE/graphs_fp16.log"
  if [[ ! -x "$bin" ]]; then record graphs FAIL 0 "dptrain is not in the bundle"; return; fi
  limited "$log" 120 "${CARRIED[@]}" "$bin" --config "$BUNDLE_ROOT/configs/fashion_mnist.yaml" \
    --set run.device=cuda --set data.root="$BUNDLE_ROOT/data" --set run.cuda_graphs=true \
    --set run.output_dir="$STAGE/graphs_run" || rc=$?
  limited "$log16" 60 "${CARRIED[@]}" "$bin" --config "$BUNDLE_ROOT/configs/fashion_mnist.yaml" \
    --set run.device=cuda --set data.root="$BUNDLE_ROOT/data" --set run.cuda_graphs=true --set run.max_steps=200 \
    --set run.precision=fp16 --set optimizer.clip_grad_norm=1.0 --set run.check_host_syncs=true \
    --set run.output_dir="$STAGE/graphs_fp16_run" || rc16=$?
  # Dropout inside the graph (NOTE [ Random numbers in CUDA graphs ]): an MLP with dropout 0.3,
  # eager and graphed, must end with the same model (its digest) — masks drawn at capture, or from
  # other counters, would not.
  local logd="$STAGE/graphs_dropout.log" rcd=0 digest_eager digest_graphed
  limited "$logd" 60 bash -c '"$@" --set run.output_dir="$0/graphs_dropout_eager" && "$@" --set run.cuda_graphs=true \
    --set run.output_dir="$0/graphs_dropout_graphed"' "$STAGE" "${CARRIED[@]}" "$bin" \
    --config "$BUNDLE_ROOT/configs/fashion_mnist.yaml" --set run.device=cuda --set data.root="$BUNDLE_ROOT/data" \
    --set model.name=mlp --set model.dropout=0.3 --set run.max_steps=120 --set run.cudnn_benchmark=false || rcd=$?
  digest_eager="$(grep -oE 'model digest [0-9a-f]+' "$logd" | sed -n 1p | awk '{print $3}')"
  digest_graphed="$(grep -oE 'model digest [0-9a-f]+' "$logd" | sed -n 2p | awk '{print $3}')"
  local epochs acc replayed
  epochs="$(grep -cE '^epoch [0-9]+/[0-9]+: ' "$log" || true)"
  acc="$(grep -E '^epoch [0-9]+/[0-9]+: ' "$log" | tail -1 | grep -oE 'test accuracy [0-9.]+' | awk '{print $3}')"
  replayed="$(grep -oE '^cuda graphs: [0-9]+ of [0-9]+' "$log" | awk '{print $3, $5}')"
  grep -E '^epoch [0-9]+/[0-9]+: |^  step time|^cuda graphs|^done:|error' "$log" "$log16" | sed 's/^/   /' | head -20
  grep -E '^cuda graphs|^done:|error' "$logd" | sed 's/^/   dropout: /' | head -6
  local note="epochs ${epochs:-0}, accuracy ${acc:-none} % (>= 89.5), replayed ${replayed:-none}; fp16+clip exit $rc16"
  note="$note; dropout eager/graphed digests ${digest_eager:-none}/${digest_graphed:-none} (exit $rcd)"
  if ((rcd == 0)) && [[ -n "$digest_eager" && "$digest_eager" != "$digest_graphed" ]]; then
    record graphs FAIL $((SECONDS - t0)) "$note: dropout's graphed run left the eager run"
    return
  fi
  if ((rc == 0 && rc16 == 0 && rcd == 0)) && [[ "$epochs" == 3 && -n "$acc" && -n "$replayed" ]] &&
    awk -v a="$acc" -v r="$replayed" 'BEGIN {split(r, n, " "); exit !(a >= 89.5 && n[1] > 0 && n[1] >= n[2] - 20)}'; then
    record graphs PASS $((SECONDS - t0)) "$note"
  elif ((rc == 0 && rc16 == 0 && rcd == 0)); then
    record graphs FAIL $((SECONDS - t0)) "$note"
  else
    record graphs "$(fail_verdict $((rc != 0 ? rc : rc16 != 0 ? rc16 : rcd)))" $((SECONDS - t0)) \
      "$note; $(grep -h -m1 -E 'error' "$log" "$log16" "$logd" | head -1 | cut -c1-200)"
  fi
}

# launch_tests' cases that need a GPU (the rest of launch_tests is CPU work, some of it under mpirun,
# which the GPU host lacks).
LAUNCH_FILTER="${LAUNCH_FILTER:-CudaGraphs.AGraphedRunTrainsLikeTheEagerRun:CudaGraphs.DropoutReplaysDrawTheMasksOfTheEagerSteps:CudaGraphs.LossScalingAndClippingRunInsideTheGraph:StepProfiler.GpuPhasesAreReadOneStepLate}"
launch_step() {
  local t0=$SECONDS copy
  if [[ ! -x "$BUNDLE_ROOT/bin/dptrain" ]]; then record launch FAIL 0 "dptrain is not in the bundle"; return; fi
  # The tests start dptrain by path, without the carried loader: a relocated copy starts by itself.
  if ! copy="$(relocated_program dptrain 2>"$STAGE/relocate_dptrain.log")"; then
    record launch FAIL $((SECONDS - t0)) "relocating dptrain failed: $(tail -1 "$STAGE/relocate_dptrain.log")"
    return
  fi
  DPTRAIN_BINARY="$copy" gtest_step launch launch_tests 150 plain --gtest_filter="$LAUNCH_FILTER"
}

# Shampoo on the GPU (NOTE [ Shampoo on a device ]): its recipe for one epoch, the float64 state on
# the GPU (cuBLAS DGEMM statistics and directions), the roots on the host; the CPU run of the same
# recipe reached 89.02 % after one epoch (bench/RESULTS.md, "Optimisers"). Records the step time
# line (its optimiser phase) and the root summary.
shampoo_step() {
  local t0=$SECONDS rc=0 bin="$BUNDLE_ROOT/bin/dptrain" log="$STAGE/shampoo.log"
  if [[ ! -x "$bin" ]]; then record shampoo FAIL 0 "dptrain is not in the bundle"; return; fi
  limited "$log" 120 "${CARRIED[@]}" "$bin" --config "$BUNDLE_ROOT/configs/fashion_mnist_shampoo.yaml" \
    --set run.device=cuda --set data.root="$BUNDLE_ROOT/data" --set run.epochs=1 \
    --set run.output_dir="$STAGE/shampoo_run" || rc=$?
  local acc optimizer_ms
  acc="$(grep -E '^epoch 1/1: ' "$log" | grep -oE 'test accuracy [0-9.]+' | awk '{print $3}')"
  optimizer_ms="$(grep -m1 -E '^  step time' "$log" | grep -oE 'optimizer [0-9.]+ ms' | awk '{print $2}')"
  grep -E '^epoch 1/1: |^  step time|^shampoo:|^done:|error' "$log" | sed 's/^/   /' | head -8
  local note="1 epoch: accuracy ${acc:-none} % (>= 87), optimizer ${optimizer_ms:-?} ms/step"
  if ((rc == 0)) && [[ -n "$acc" ]] && awk -v a="$acc" 'BEGIN {exit !(a >= 87)}'; then
    record shampoo PASS $((SECONDS - t0)) "$note"
  elif ((rc == 0)); then
    record shampoo FAIL $((SECONDS - t0)) "$note"
  else
    record shampoo "$(fail_verdict "$rc")" $((SECONDS - t0)) "$note; exit $rc: $(grep -m1 -E 'error' "$log" | cut -c1-200)"
  fi
}

# record_pair STEP T0 RC TRC DPTRAIN_LOG TORCH_LOG: the verdict of a step that ran dptrain's side
# and PyTorch's, with the end of a failing side's log.
record_pair() {
  local step="$1" t0="$2" rc="$3" trc="$4" dlog="$5" tlog="$6"
  local note="dptrain exit $rc, torch exit $trc (table in summary)"
  if ((rc == 0 && trc == 0)); then record "$step" PASS $((SECONDS - t0)) "$note"
  else
    ((rc != 0)) && note="$note; dptrain: $(grep -v -e '^{' -e '^+ ' "$dlog" | tail -2 | tr '\n' ' ' | cut -c1-160)"
    ((trc != 0)) && note="$note; torch: $(tail -1 "$tlog" | cut -c1-160)"
    record "$step" "$(fail_verdict $((rc != 0 ? rc : trc)))" $((SECONDS - t0)) "$note"
  fi
}

bench_step() {
  local t0=$SECONDS rc=0 trc=0 bin="$BUNDLE_ROOT/bin/train_step_bench"
  local args=(--warmup "${BENCH_WARMUP:-20}" --iters "${BENCH_ITERS:-20}" --block "${BENCH_BLOCK:-10}")
  if [[ -x "$bin" ]]; then
    # Both memory formats (NOTE [ Channels-last ]; channels-last cases are named *_cl).
    limited "$STAGE/bench_dptrain.log" 75 "${CARRIED[@]}" "$bin" --device cuda --tf32 "${args[@]}" || rc=$?
    limited "$STAGE/bench_dptrain_cl.log" 75 "${CARRIED[@]}" "$bin" --device cuda --tf32 --memory-format channels_last \
      "${args[@]}" || rc=$((rc ? rc : $?))
  else
    echo "train_step_bench is not in the bundle" >"$STAGE/bench_dptrain.log"; rc=1
  fi
  cat "$STAGE/bench_dptrain.log" "$STAGE/bench_dptrain_cl.log" 2>/dev/null | grep '^{' >"$STAGE/bench_dptrain.jsonl" || true
  limited "$STAGE/bench_torch.log" 150 env PYTHONUNBUFFERED=1 python3 "$GPU_DIR/torch_gpu_step.py" "${args[@]}" || trc=$?
  grep '^{' "$STAGE/bench_torch.log" >"$STAGE/bench_torch.jsonl" || true
  python3 "$GPU_DIR/torch_gpu_step.py" table --dptrain "$STAGE/bench_dptrain.jsonl" --torch "$STAGE/bench_torch.jsonl" \
    >"$STAGE/bench_table.txt" 2>&1 || true
  sed 's/^/   /' "$STAGE/bench_table.txt"
  record_pair bench "$t0" "$rc" "$trc" "$STAGE/bench_dptrain.log" "$STAGE/bench_torch.log"
}

# ResNet-50 at 224x224, batch 128, channels-last (the MLPerf recipe's per-GPU shape): float32 with
# TF32, and bf16 and fp16 autocast, next to PyTorch eager in the same settings (issues 9 and 11).
rn50_step() {
  local t0=$SECONDS rc=0 trc=0 bin="$BUNDLE_ROOT/bin/train_step_bench" precision
  local args=(--only resnet50_224_b128 --warmup "${RN50_WARMUP:-10}" --iters "${RN50_ITERS:-10}" --block "${RN50_BLOCK:-5}")
  : >"$STAGE/rn50_dptrain.log"
  if [[ -x "$bin" ]]; then
    for precision in fp32 bf16 fp16; do
      limited "$STAGE/rn50_dptrain_$precision.log" 60 "${CARRIED[@]}" "$bin" --device cuda --tf32 \
        --memory-format channels_last --precision "$precision" "${args[@]}" || rc=$((rc ? rc : $?))
      cat "$STAGE/rn50_dptrain_$precision.log" >>"$STAGE/rn50_dptrain.log"
      rm -f "$STAGE/rn50_dptrain_$precision.log"
    done
    # The same steps replayed as one CUDA graph each (NOTE [ CUDA graphs ]; issue 11's goal: >= 1.3x
    # PyTorch eager's images/s in bf16 and fp16).
    for precision in bf16 fp16 fp32; do
      limited "$STAGE/rn50_dptrain_${precision}_graph.log" 60 "${CARRIED[@]}" "$bin" --device cuda --tf32 --cuda-graphs \
        --memory-format channels_last --precision "$precision" "${args[@]}" || rc=$((rc ? rc : $?))
      cat "$STAGE/rn50_dptrain_${precision}_graph.log" >>"$STAGE/rn50_dptrain.log"
      rm -f "$STAGE/rn50_dptrain_${precision}_graph.log"
    done
  else
    echo "train_step_bench is not in the bundle" >"$STAGE/rn50_dptrain.log"; rc=1
  fi
  grep '^{' "$STAGE/rn50_dptrain.log" >"$STAGE/bench_rn50_dptrain.jsonl" || true
  limited "$STAGE/rn50_torch.log" 120 env PYTHONUNBUFFERED=1 python3 "$GPU_DIR/torch_gpu_step.py" "${args[@]}" \
    --formats channels_last --precisions fp32,bf16,fp16 || trc=$?
  grep '^{' "$STAGE/rn50_torch.log" >"$STAGE/bench_rn50_torch.jsonl" || true
  python3 "$GPU_DIR/torch_gpu_step.py" table --dptrain "$STAGE/bench_rn50_dptrain.jsonl" \
    --torch "$STAGE/bench_rn50_torch.jsonl" >"$STAGE/rn50_table.txt" 2>&1 || true
  sed 's/^/   /' "$STAGE/rn50_table.txt"
  record_pair rn50 "$t0" "$rc" "$trc" "$STAGE/rn50_dptrain.log" "$STAGE/rn50_torch.log"
}

# Where the ResNet-50 step's GPU time goes, kernel by kernel, on both sides: Nsight Compute on one
# bf16 channels-last step (b128) after the warm-up (the programs bracket it with
# cudaProfilerStart/Stop), summarised by ncu_summary.py. A diagnosis, not a check: it passes when
# both captures produced a table.
profile_step() {
  local t0=$SECONDS rc=0 trc=0 ncu copy side
  ncu="$(command -v ncu || true)"
  [[ -z "$ncu" && -x /usr/local/cuda/bin/ncu ]] && ncu=/usr/local/cuda/bin/ncu
  if [[ -z "$ncu" ]]; then
    echo "ncu not found" >"$STAGE/profile_dptrain.log"
    record profile "$(((HAVE_GPU == 0)) && echo NO-GPU || echo FAIL)" 0 "ncu not found"
    return
  fi
  local nargs=(--profile-from-start off --metrics gpu__time_duration.sum --csv --page raw --target-processes all)
  # PROFILE_PRECISION (bf16 by default; fp16 or fp32) picks the step's precision on both sides.
  local precision="${PROFILE_PRECISION:-bf16}"
  local pargs=(--only resnet50_224_b128 --precision "$precision" --memory-format channels_last --warmup 10 --profile-steps 1)
  if copy="$(relocated_program train_step_bench 2>"$STAGE/profile_relocate.log")"; then
    limited "$STAGE/profile_dptrain.log" 120 "$ncu" "${nargs[@]}" --log-file "$STAGE/profile_dptrain.csv" \
      "$copy" --device cuda --tf32 "${pargs[@]}" || rc=$?
  else
    echo "relocating train_step_bench failed: $(cat "$STAGE/profile_relocate.log")" >"$STAGE/profile_dptrain.log"; rc=1
  fi
  limited "$STAGE/profile_torch.log" 120 "$ncu" "${nargs[@]}" --log-file "$STAGE/profile_torch.csv" \
    env PYTHONUNBUFFERED=1 python3 "$GPU_DIR/torch_gpu_step.py" --only resnet50_224_b128 --precisions "$precision" \
    --formats channels_last --warmup 10 --profile-steps 1 || trc=$?
  : >"$STAGE/profile_table.txt"
  for side in dptrain torch; do
    python3 "$GPU_DIR/ncu_summary.py" "$STAGE/profile_$side.csv" --steps 1 --label "$side" \
      >>"$STAGE/profile_table.txt" 2>&1 || { [[ $side == dptrain ]] && rc=$((rc ? rc : 1)) || trc=$((trc ? trc : 1)); }
    echo >>"$STAGE/profile_table.txt"
  done
  sed 's/^/   /' "$STAGE/profile_table.txt" | head -80
  record_pair profile "$t0" "$rc" "$trc" "$STAGE/profile_dptrain.log" "$STAGE/profile_torch.log"
}

# BERT's training step in bf16 next to PyTorch's (the same Hugging Face layout, eager attention; and
# BERT-large with PyTorch's fused attention).
bert_step() {
  local t0=$SECONDS rc=0 trc=0 bin="$BUNDLE_ROOT/bin/bert_step_bench"
  local args=(--device cuda --precision bf16 --warmup "${BERT_WARMUP:-5}" --iters "${BERT_ITERS:-10}"
    --block "${BERT_BLOCK:-5}")
  if [[ -x "$bin" ]]; then
    limited "$STAGE/bert_dptrain.log" 60 "${CARRIED[@]}" "$bin" "${args[@]}" || rc=$?
  else
    echo "bert_step_bench is not in the bundle" >"$STAGE/bert_dptrain.log"; rc=1
  fi
  grep '^{' "$STAGE/bert_dptrain.log" >"$STAGE/bench_bert_dptrain.jsonl" || true
  limited "$STAGE/bert_torch.log" 60 env PYTHONUNBUFFERED=1 python3 "$ROOT/bench/bert_reference.py" "${args[@]}" || trc=$?
  grep '^{' "$STAGE/bert_torch.log" >"$STAGE/bench_bert_torch.jsonl" || true
  # PyTorch's fused attention (scaled_dot_product_attention) on BERT-large: what a fused attention
  # kernel would give against dptrain's fused softmax between two cuBLAS GEMMs (issue 13's choice).
  # A measurement only: its failure does not fail the step.
  limited "$STAGE/bert_torch_sdpa.log" 45 env PYTHONUNBUFFERED=1 python3 "$ROOT/bench/bert_reference.py" "${args[@]}" \
    --attention sdpa --only bert_large || true
  grep '^{' "$STAGE/bert_torch_sdpa.log" >>"$STAGE/bench_bert_torch.jsonl" || true
  python3 - "$STAGE/bench_bert_dptrain.jsonl" "$STAGE/bench_bert_torch.jsonl" >"$STAGE/bert_table.txt" 2>&1 <<'PY' || true
import json, sys
def rows(path):
    out = {}
    for line in open(path):
        if line.startswith("{"):
            r = json.loads(line)
            out[r["name"]] = r["median_ms"]
    return out
d, t = rows(sys.argv[1]), rows(sys.argv[2])
print(f"{'case':28} {'dptrain ms':>11} {'torch ms':>10} {'ratio':>6} {'torch sdpa ms':>14} {'ratio':>6}")
for name in sorted(set(d) | {n for n in t if not n.endswith("_sdpa")}):
    a, b, c = d.get(name), t.get(name), t.get(name + "_sdpa")
    ratio = f"{a / b:.2f}" if a and b else "-"
    ratio_sdpa = f"{a / c:.2f}" if a and c else "-"
    print(f"{name:28} {a if a else '-':>11} {b if b else '-':>10} {ratio:>6} {c if c else '-':>14} {ratio_sdpa:>6}")
PY
  sed 's/^/   /' "$STAGE/bert_table.txt"
  record_pair bert "$t0" "$rc" "$trc" "$STAGE/bert_dptrain.log" "$STAGE/bert_torch.log"
}

# BERT-tiny on the demo corpus three ways — fixed-size batches, max_tokens, max_tokens with packing —
# in bf16, two epochs each (the second's rate: the first holds the warm-up), sequences/s and waste.
packing_step() {
  local t0=$SECONDS rc=0 bin="$BUNDLE_ROOT/bin/dptrain" name
  local -A sets=([fixed]="--set data.batching=fixed" [max_tokens]="--set data.packing=none"
    [packed]="--set data.packing=greedy")
  if [[ ! -x "$bin" ]]; then record packing FAIL 0 "dptrain is not in the bundle"; return; fi
  for name in fixed max_tokens packed; do
    # shellcheck disable=SC2086
    limited "$STAGE/packing_$name.log" 45 "${CARRIED[@]}" "$bin" --config "$BUNDLE_ROOT/configs/bert_tiny.yaml" \
      --set run.device=cuda --set run.precision=bf16 --set run.epochs=2 --set data.root="$BUNDLE_ROOT/data/fortunes" \
      --set run.output_dir="$STAGE/packing_$name" ${sets[$name]} || rc=$?
  done
  {
    printf '%-11s %14s %14s %s\n' batching "sequences/s" "epoch 2 (s)" "token batching (epoch 2)"
    for name in fixed max_tokens packed; do
      local epoch rate seconds waste
      epoch="$(grep -E '^epoch 2/2: ' "$STAGE/packing_$name.log" | head -1)"
      rate="$(echo "$epoch" | grep -oE '[0-9.]+ sequences/s' | awk '{print $1}')"
      seconds="$(echo "$epoch" | grep -oE ', [0-9.]+ s, ' | grep -oE '[0-9.]+')"
      waste="$(grep -E '^  token batching: ' "$STAGE/packing_$name.log" | sed -n 2p | cut -d'|' -f1,3 | sed 's/^  token batching: //')"
      printf '%-11s %14s %14s %s\n' "$name" "${rate:--}" "${seconds:--}" "${waste:--}"
    done
  } >"$STAGE/packing_table.txt"
  sed 's/^/   /' "$STAGE/packing_table.txt"
  local note="bert_tiny bf16, fixed / max_tokens / packed (table in summary)"
  if ((rc == 0)); then record packing PASS $((SECONDS - t0)) "$note"
  else
    record packing "$(fail_verdict "$rc")" $((SECONDS - t0)) \
      "$note; exit $rc: $(grep -h -m1 -E 'error' "$STAGE"/packing_*.log | head -1 | cut -c1-200)"
  fi
}

memcheck_step() {
  local t0=$SECONDS rc=0 vrc=0 bin="$BUNDLE_ROOT/bin/runtime_tests" log="$STAGE/memcheck.log"
  local xml="$STAGE/xml/runtime_tests.memcheck.xml" sanitizer form="target: the carried loader"
  local filter="${MEMCHECK_FILTER:-OpHarness/CudaVsCpu.*}"  # the op harness took 8 s under memcheck on an H200
  sanitizer="$(command -v compute-sanitizer || true)"
  [[ -z "$sanitizer" && -x /usr/local/cuda/bin/compute-sanitizer ]] && sanitizer=/usr/local/cuda/bin/compute-sanitizer
  if [[ -z "$sanitizer" ]]; then
    echo "compute-sanitizer not found" >"$log"
    record memcheck "$(((HAVE_GPU == 0)) && echo NO-GPU || echo FAIL)" 0 "compute-sanitizer not found"
    return
  fi
  if [[ ! -x "$bin" ]]; then record memcheck FAIL 0 "runtime_tests is not in the bundle"; return; fi
  local sargs=(--tool memcheck --target-processes all --error-exitcode 97 --print-limit 200) copy=""
  # First the relocated copy of runtime_tests (an ordinary executable whose interpreter and RPATH
  # are the carried loader and libraries); if it does not start, the carried loader as the target,
  # running the program in its own process (the sanitizer's injection, LD_PRELOAD and
  # CUDA_INJECTION64_PATH, reaches it through the environment either way).
  if copy="$(relocated_program runtime_tests 2>"$STAGE/relocate.log")"; then
    form="target: the relocated copy of runtime_tests"
    limited "$log" 420 "$sanitizer" "${sargs[@]}" "$copy" --gtest_filter="$filter" --gtest_output="xml:$xml" || rc=$?
  else
    echo "relocating runtime_tests failed: $(cat "$STAGE/relocate.log")" >"$log"
    rc=1
  fi
  if ! grep -q '^\[==========\] Running' "$log" && ((rc != 124 && rc != 137 && rc != 125 && HAVE_GPU)); then
    mv "$log" "$STAGE/memcheck-relocated.log"
    form="target: the carried loader (the relocated copy did not start: memcheck-relocated.log)"
    rc=0
    limited "$log" 420 "$sanitizer" "${sargs[@]}" "${CARRIED[@]}" "$bin" --gtest_filter="$filter" \
      --gtest_output="xml:$xml" || rc=$?
  fi
  local summary
  summary="$(grep -m1 'ERROR SUMMARY' "$log" || echo "no ERROR SUMMARY line")"
  python3 "$GPU_DIR/gtest_verdict.py" "$xml" --program runtime_tests --expected-skips "$GPU_DIR/expected_skips.txt" \
    >"$STAGE/memcheck.verdict.txt" 2>&1 || vrc=$?
  sed 's/^/   /' "$STAGE/memcheck.verdict.txt"
  grep -E '^========= (Invalid|Program hit|Error|Uninitialized|Out-of-range)' "$log" | sort | uniq -c | sort -rn | head -10 | sed 's/^/   /'
  local note="$summary; $(head -1 "$STAGE/memcheck.verdict.txt" | sed 's/^runtime_tests: //'); $form"
  if ! grep -q '^\[==========\] Running' "$log"; then
    note="$note; the program did not start under the sanitizer: $(grep -v '^+ ' "$log" | head -3 | tr '\n' ' ' | cut -c1-240)"
  fi
  if ((rc == 0 && vrc == 0)) && grep -q 'ERROR SUMMARY: 0 errors' "$log"; then
    record memcheck PASS $((SECONDS - t0)) "$note"
  else
    record memcheck "$(fail_verdict "$rc")" $((SECONDS - t0)) "$note"
  fi
}

# run_probe STEP PROGRAM CAP MARGIN EXTRA: runs a bundled probe with --budget-s MARGIN seconds
# under its time limit (the probes stop themselves within it), output to $STAGE/STEP.log, EXTRA
# word-split onto its options; returns its status.
run_probe() {
  local step="$1" program="$2" cap="$3" margin="$4" extra="$5" lim bin="$BUNDLE_ROOT/bin/$2"
  lim="$(limit_for "$cap")"
  if [[ ! -x "$bin" ]]; then
    echo "$program is not in the bundle" >"$STAGE/$step.log"
    return 1
  fi
  # shellcheck disable=SC2086
  limited "$STAGE/$step.log" "$cap" "${CARRIED[@]}" "$bin" --budget-s "$((lim > margin + 15 ? lim - margin : 10))" $extra
}

# record_probe STEP T0 RC NOTE: a probe step's verdict (its last line when it failed).
record_probe() {
  local step="$1" t0="$2" rc="$3" note="$4"
  if ((rc == 0)); then record "$step" PASS $((SECONDS - t0)) "$note"
  else record "$step" "$(fail_verdict "$rc")" $((SECONDS - t0)) "$note; exit $rc: $(grep -v '^+ ' "$STAGE/$step.log" | tail -1 | cut -c1-200)"
  fi
}

# dptrain's batch-norm kernels against cuDNN's persistent batch norm at ResNet-50's shapes
# (bench/gpu/batch_norm_probe.cpp): a measurement for issue 11, which also checks that cuDNN's
# results agree with dptrain's. Passes when the probe ran and every check agreed, whatever cuDNN
# supports (a refused layer is a result). BNORM_ARGS: more options, e.g. "--dtypes fp16 --iters 50".
bnorm_step() {
  local t0=$SECONDS rc=0 log="$STAGE/bnorm.log"
  run_probe bnorm batch_norm_probe 90 20 "${BNORM_ARGS:-}" || rc=$?
  grep -vE '^\+ |^batch_norm_probe: done' "$log" >"$STAGE/bnorm_table.txt"
  sed -n '/^summary/,$p' "$log" | sed 's/^/   /' | head -6
  local agreed refused
  agreed="$(grep -c ': agree$' "$log" 2>/dev/null || true)"
  refused="$(grep -c 'refused (below)' "$log" 2>/dev/null || true)"
  record_probe bnorm "$t0" "$rc" "checks agreed: ${agreed:-0}; layers cuDNN refused: ${refused:-0} (table in summary)"
}

# Which convolution + batch-norm fusions cuDNN's graph API runs on this GPU, and how fast
# (bench/gpu/cudnn_fusion_probe.cpp): a measurement for issue 11, not a check of dptrain. It passes
# when the probe ran (exit 0: the plain convolutions ran and the fused results it could run match
# the unfused ones), whatever cuDNN supports. FUSION_ARGS: more options, e.g. "--dtypes fp16
# --only layer1".
fusion_step() {
  local t0=$SECONDS rc=0 log="$STAGE/fusion.log"
  run_probe fusion cudnn_fusion_probe 150 25 "${FUSION_ARGS:-}" || rc=$?
  sed -n '/^summary/,$p' "$log" >"$STAGE/fusion_table.txt"
  grep -E '^  check ' "$log" >>"$STAGE/fusion_table.txt" || true
  sed 's/^/   /' "$STAGE/fusion_table.txt" | head -40
  local ran probed
  ran="$(grep -cE ' ms  engine ' "$log" 2>/dev/null || true)"
  probed="$(grep -cE '^  layer' "$log" 2>/dev/null || true)"
  record_probe fusion "$t0" "$rc" "graphs that ran: ${ran:-0} of ${probed:-0} probed (table in summary)"
}

# Keeps a big log's head and tail (a file that comes back is at most 16 MiB).
trim_log() {
  local f="$1" max=$((3 * 1024 * 1024))
  (($(stat -c %s "$f") > max)) || return 0
  { head -c $((1024 * 1024)) "$f"; printf '\n\n[... %s bytes cut by run_on_device.sh ...]\n\n' "$(stat -c %s "$f")"
    tail -c $((2 * 1024 * 1024)) "$f"; } >"$f.trim" && mv "$f.trim" "$f"
}

prove() {
  SECONDS=0
  local out="${OUT:-$BUILD_DIR/prove-out}"
  mkdir -p "$out"
  STAGE="$(mktemp -d /tmp/dptrain-prove.XXXXXX)"
  mkdir -p "$STAGE/xml"
  set +e
  open_bundle
  echo "== prove: bundle $(awk '/^built:/ {print $2}' "$BUNDLE_ROOT/MANIFEST.txt") git $(awk '/^git:/ {print $2}' "$BUNDLE_ROOT/MANIFEST.txt"), budget ${PROVE_BUDGET_S} s, steps: facts $PROVE_STEPS"
  if timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU [0-9]'; then HAVE_GPU=1; fi
  if grep -q '^cpu_arch: x86-64-v4' "$BUNDLE_ROOT/MANIFEST.txt" && ! grep -qw avx512f /proc/cpuinfo; then
    echo "WARNING: this CPU lacks AVX-512 but the bundle was built for x86-64-v4: programs will die of SIGILL" >&2
  fi
  # Fashion-MNIST tests read the Debian path: link the carried copy there if it is absent.
  if [[ ! -e /usr/share/datasets/fashion-mnist ]]; then
    mkdir -p /usr/share/datasets 2>/dev/null && ln -s "$BUNDLE_ROOT/data" /usr/share/datasets/fashion-mnist 2>/dev/null &&
      echo "linked /usr/share/datasets/fashion-mnist -> the carried data"
  fi
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-8}"

  local t0=$SECONDS
  facts "$STAGE"
  local unresolved facts_note
  unresolved="$(grep -h 'not found' "$STAGE"/*.libs.txt 2>/dev/null | awk '{print $1}' | sort -u | tr '\n' ' ')"
  facts_note="$( ((HAVE_GPU)) && timeout 20 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 || echo 'nvidia-smi sees no GPU')"
  if [[ -n "$unresolved" ]]; then
    record facts FAIL $((SECONDS - t0)) "libraries the carried loader cannot find here: $unresolved"
  else
    record facts "$( ((HAVE_GPU)) && echo PASS || echo NO-GPU)" $((SECONDS - t0)) "$facts_note"
  fi
  local step
  for step in $PROVE_STEPS; do
    [[ " $PROVE_ALL_STEPS " == *" $step "* ]] || { record "$step" FAIL 0 "no such step (PROVE_STEPS; steps: $PROVE_ALL_STEPS)"; continue; }
    case "$step" in
      cuda_tests) gtest_step cuda_tests runtime_tests 240 plain ;;
      nccl_tests) gtest_step nccl_tests comm_nccl_tests 120 mpi ;;
      *) "${step}_step" ;;
    esac
  done

  # ---- summary and packing: at most 8 files under $OUT, each ≤ 16 MiB --------------------------------
  local summary="$STAGE/summary.txt"
  {
    echo "dptrain GPU proof — $(date -u +%FT%TZ), $((SECONDS)) s"
    facts_brief "$STAGE"
    echo
    echo "step        verdict   time  note"
    printf '%s\n' "${STEP_LINES[@]}"
    echo
    echo "training (dptrain --config configs/fashion_mnist.yaml --set run.device=cuda):"
    grep -E '^epoch [0-9]+/[0-9]+: ' "$STAGE/train.log" 2>/dev/null | sed 's/^/  /' || true
    [[ -s "$STAGE/train.log" ]] && ! grep -qE '^epoch [0-9]+/[0-9]+: ' "$STAGE/train.log" && echo "  (no epoch finished)"
    echo
    echo "the same with run.cuda_graphs (each step after the warm-up replayed as one CUDA graph):"
    grep -hE '^epoch [0-9]+/[0-9]+: |^  step time|^cuda graphs' "$STAGE/graphs.log" 2>/dev/null | sed 's/^/  /' || true
    grep -hE '^cuda graphs|^done:' "$STAGE/graphs_dropout.log" 2>/dev/null | sed 's/^/  MLP, dropout 0.3: /' || true
    echo
    echo "Shampoo on the GPU (configs/fashion_mnist_shampoo.yaml, 1 epoch; state and kernels on the GPU, roots on the host):"
    grep -hE '^epoch 1/1: |^  step time|^shampoo:' "$STAGE/shampoo.log" 2>/dev/null | sed 's/^/  /' || true
    echo
    echo "training step, dptrain vs PyTorch $(grep -o '"torch": "[^"]*"' "$STAGE/bench_torch.jsonl" 2>/dev/null | head -1 | cut -d'"' -f4) on the same GPU:"
    sed 's/^/  /' "$STAGE/bench_table.txt" 2>/dev/null || true
    echo
    echo "ResNet-50 224x224 b128 channels-last, dptrain vs PyTorch (images/s = 128000 / ms):"
    sed 's/^/  /' "$STAGE/rn50_table.txt" 2>/dev/null || true
    echo
    echo "BERT training step in bf16 (bert_step_bench vs bench/bert_reference.py), same GPU:"
    sed 's/^/  /' "$STAGE/bert_table.txt" 2>/dev/null || true
    echo
    echo "BERT-tiny on the demo corpus in bf16 (configs/bert_tiny.yaml --set run.device=cuda), by batching:"
    sed 's/^/  /' "$STAGE/packing_table.txt" 2>/dev/null || true
    echo
    echo "ResNet-50 b128 ${PROFILE_PRECISION:-bf16} channels-last, one step's kernels (ncu; both sides):"
    sed 's/^/  /' "$STAGE/profile_table.txt" 2>/dev/null || true
    echo
    echo "ResNet-50's batch norms, dptrain's kernels vs cuDNN's persistent mode (batch_norm_probe; b128, NHWC):"
    sed 's/^/  /' "$STAGE/bnorm_table.txt" 2>/dev/null || true
    echo
    echo "cuDNN graph-API fusions of convolution + batch norm (cudnn_fusion_probe; ResNet-50 shapes, b128, NHWC):"
    sed 's/^/  /' "$STAGE/fusion_table.txt" 2>/dev/null || true
  } >"$summary"
  local f
  for f in "$STAGE"/*.log; do trim_log "$f"; done
  cp "$summary" "$out/summary.txt"
  cp "$STAGE/facts.txt" "$out/facts.txt" 2>/dev/null
  # Without the runs' weights (model.safetensors): with them the archive passed 16 MiB and was cut.
  tar -C "$STAGE" -czf "$out/logs.tar.gz" --exclude=xml --exclude=summary.txt --exclude='*.safetensors' . 2>/dev/null
  tar -C "$STAGE" -czf "$out/gtest-xml.tar.gz" xml 2>/dev/null
  cat "$STAGE"/bench_*.jsonl >"$out/bench.jsonl" 2>/dev/null
  for f in "$out"/*; do
    (($(stat -c %s "$f") <= 16 * 1024 * 1024)) || { echo "WARNING: $f is over 16 MiB: cut"; truncate -s 16M "$f"; }
  done
  echo
  echo "== files under \$OUT ($out): $(cd "$out" && ls | tr '\n' ' ')"
  echo "=================================================================================================="
  cat "$summary"
  rm -rf "$STAGE" /tmp/dptrain-relocated /tmp/dptrain-lib /tmp/dptrain-ld.so
  close_bundle
  set -e
  if ((STEP_FAILED)); then
    echo "RESULT: FAILED (see the steps above; logs in logs.tar.gz)"
    return 1
  fi
  if ((HAVE_GPU == 0 || STEP_NOGPU)); then
    echo "RESULT: NO GPU — nvidia-smi saw none (or a GPU step could not use it): NOTHING ON A GPU WAS PROVEN"
    return 3
  fi
  echo "RESULT: PASSED on the GPU"
  return 0
}

# All of it in one function called on the last line: bash reads a script as it runs, so an edit
# of this file during a long `build` or `prove` cannot change what runs.
main() {
  case "${1:-}" in
    build) build ;;
    check-mpi) check_mpi ;;
    test) shift; test_on_device "$@" ;;
    prove) prove ;;
    relocate)  # relocate PROGRAM: prints a copy that starts without the loader (see relocated_program)
      shift; [[ $# == 1 ]] || die "usage: $0 relocate PROGRAM (one of the bundle's bin/)"
      open_bundle; relocated_program "$1" || die "relocating $1 failed"
      echo "(the unpacked bundle stays in $WORK for it)" >&2 ;;
    *) die "usage: $0 build | prove | test [gtest arguments] | check-mpi | relocate PROGRAM" ;;
  esac
}
main "$@"; exit $?

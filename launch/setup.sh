#!/usr/bin/env bash
# Installs dptrain's Debian dependencies and builds it into build/ (Release, CPU arch x86-64-v4,
# CUDA backend when /usr/local/cuda is present). Run as root (or with sudo) from anywhere.
#   launch/setup.sh [extra cmake args...]      e.g. -DDPTRAIN_CPU_ARCH=x86-64-v3
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake ninja-build ccache pkg-config
  # ocl-icd-opencl-dev: only Recommended by libdnnl-dev, but its CMake config requires OpenCL
  libeigen3-dev libyaml-cpp-dev libopenblas-openmp-dev libdnnl-dev ocl-icd-opencl-dev zlib1g-dev libturbojpeg0-dev nlohmann-json3-dev libcli11-dev
  libutf8proc-dev  # Unicode for the WordPiece tokenizer
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin slurm-wlm munge
  clang libclang-rt-14-dev  # the libFuzzer targets of tests/fuzz (a standing check, not the build)
  dataset-fashion-mnist
  fortunes  # the built-in English text corpus for BERT's demo (runtime/text/corpus.h)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$(nproc)"

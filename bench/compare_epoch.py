#!/usr/bin/env python3
"""Whole Fashion-MNIST epochs and the training-step benchmark, dptrain and PyTorch 1.13, all in
one window: each round runs one epoch of the default recipe on each side (dptrain
configs/fashion_mnist.yaml; bench/torch_fashion_mnist.py, its PyTorch twin) and the SmallCNN b128
step benchmark on each side (train_step_bench; torch_reference.py), alternating. The machine's
speed drifts by up to 2x within minutes, so an epoch ratio taken at one time and a step ratio
taken at another disagree by that much; here every ratio comes from the same rounds.

  python3 bench/compare_epoch.py [--build build] [--rounds 3] [--threads 2]

Prints per round the four times and, at the end, the medians and ratios (dptrain / PyTorch) as
Markdown, with dptrain's ms per training step inside its epoch (epoch seconds / steps) beside
the step benchmark's.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
STEPS_PER_EPOCH = 469  # 60,000 / 128, the last batch partial (data.drop_last: false)


def run(cmd, env=None):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch_env = dict(os.environ)
    torch_env.pop("OPENBLAS_CORETYPE", None)
    torch_env.pop("OPENBLAS_L2_SIZE", None)
    out_dir = tempfile.mkdtemp(prefix="compare_epoch_")
    figures = {k: [] for k in ("ours_epoch", "torch_epoch", "ours_step", "torch_step")}
    for r in range(args.rounds):
        text = run([os.path.join(args.build, "launch", "dptrain"), "--config",
                    os.path.join(ROOT, "configs", "fashion_mnist.yaml"), "--set", "run.epochs=1", "--set",
                    f"run.threads={args.threads}", "--set", f"run.output_dir={out_dir}/r{r}"])
        figures["ours_epoch"].append(float(re.search(r"epoch 1/1: .*?, ([0-9.]+) s,", text).group(1)))
        text = run(["/usr/bin/python3", os.path.join(HERE, "torch_fashion_mnist.py"), "--epochs", "1", "--threads",
                    str(args.threads)], torch_env)
        figures["torch_epoch"].append(float(re.search(r"epoch 1: ([0-9.]+) s", text).group(1)))
        text = run([os.path.join(args.build, "bench", "train_step_bench"), "--threads", str(args.threads), "--only",
                    "small_cnn_b128"])
        figures["ours_step"].append(json.loads(text.splitlines()[-1])["median_ms"])
        text = run(["/usr/bin/python3", os.path.join(HERE, "torch_reference.py"), "--threads", str(args.threads),
                    "--only", "small_cnn_b128"], torch_env)
        figures["torch_step"].append(json.loads(text.splitlines()[-1])["median_ms"])
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in figures.items()), file=sys.stderr)
    med = {k: statistics.median(v) for k, v in figures.items()}
    print("| measure (SmallCNN b128, 2 threads) | dptrain | PyTorch 1.13 | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| one epoch, s (training only) | {med['ours_epoch']:.1f} | {med['torch_epoch']:.1f} | "
          f"{med['ours_epoch'] / med['torch_epoch']:.2f} |")
    print(f"| ms per step inside the epoch | {1e3 * med['ours_epoch'] / STEPS_PER_EPOCH:.1f} | "
          f"{1e3 * med['torch_epoch'] / STEPS_PER_EPOCH:.1f} | {med['ours_epoch'] / med['torch_epoch']:.2f} |")
    print(f"| step benchmark, ms (median of 20) | {med['ours_step']:.1f} | {med['torch_step']:.1f} | "
          f"{med['ours_step'] / med['torch_step']:.2f} |")


if __name__ == "__main__":
    main()

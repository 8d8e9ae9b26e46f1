#!/usr/bin/env python3
"""Per-layer convolution times, dptrain beside PyTorch 1.13 (oneDNN), in one run: conv_bench
(SmallCNN and ResNet-18 at 32x32, batch 32) against conv_reference.py, and conv_rn50_bench
(ResNet-50 at 224x224, batch 8) against conv_rn50_reference.py. Prints Markdown tables: per layer
the forward / input-gradient / weight-gradient milliseconds of each side, the ratio of the
layer's sum, and the sums over all layers.

  python3 bench/compare_conv.py [--build build] [--threads 2] [--iters 20] [--rounds 2] [--set rn50|small|both]

Rounds alternate the two programs; each pass's figure is the best (min) over rounds of the
per-round median, so a round that the shared machine preempted does not decide the figure.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PASSES = ("forward", "backward_input", "backward_weight")
SETS = {
    "small": ("conv_bench", "conv_reference.py"),
    "rn50": ("conv_rn50_bench", "conv_rn50_reference.py"),
}


def run_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def best_of(records, into):
    for r in records:
        key = (r["name"], r["pass"])
        into[key] = min(into.get(key, float("inf")), r["median_ms"])


def table(ours, theirs, title):
    layers = list(dict.fromkeys(name for name, _ in ours))
    print(f"\n{title}\n")
    print("| layer | dptrain fwd / bwd-input / bwd-weight ms | PyTorch fwd / bwd-input / bwd-weight ms | ratio (sum) |")
    print("|---|---|---|---:|")
    total_ours = total_theirs = 0.0
    for layer in layers:
        a = [ours.get((layer, p)) for p in PASSES]
        b = [theirs.get((layer, p)) for p in PASSES]
        # A pass one side does not time (the first layer's input gradient) is left out of both sums.
        both = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
        sa, sb = sum(x for x, _ in both), sum(y for _, y in both)
        total_ours += sa
        total_theirs += sb
        fmt = lambda v: " / ".join("–" if x is None else f"{x:.2f}" for x in v)
        print(f"| {layer} | {fmt(a)} | {fmt(b)} | {sa / sb:.2f} |")
    print(f"| **sum over the layers** | **{total_ours:.1f}** | **{total_theirs:.1f}** | "
          f"**{total_ours / total_theirs:.2f}** |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--set", choices=["small", "rn50", "both"], default="both")
    args = ap.parse_args()
    torch_env = dict(os.environ)
    torch_env.pop("OPENBLAS_CORETYPE", None)
    torch_env.pop("OPENBLAS_L2_SIZE", None)
    chosen = list(SETS) if args.set == "both" else [args.set]
    results = {name: ({}, {}) for name in chosen}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
        for name in chosen:
            binary, script = SETS[name]
            common = ["--threads", str(args.threads), "--iters", str(args.iters)]
            best_of(run_json([os.path.join(args.build, "bench", binary)] + common), results[name][0])
            best_of(run_json(["/usr/bin/python3", os.path.join(HERE, script)] + common, torch_env), results[name][1])
    titles = {"small": "SmallCNN (b128, 28x28) and ResNet-18 (b32, 32x32) layers",
              "rn50": "ResNet-50 (b8, 224x224) layers"}
    for name in chosen:
        table(*results[name], f"{titles[name]}, {args.threads} threads, best of {args.rounds} rounds' medians "
                                f"of {args.iters} iterations:")


if __name__ == "__main__":
    main()

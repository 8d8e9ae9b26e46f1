#!/usr/bin/env python3
"""Step time of each optimiser recipe (issue 4): SmallCNN on Fashion-MNIST, batch 128, 2 threads.

For every recipe in configs/fashion_mnist{,_adamw,_lars,_lamb,_shampoo}.yaml it runs dptrain for
--steps steps (real data; the test set cut to a few hundred images so the closing evaluation costs
next to nothing) and reads the per-phase milliseconds of the last step record in metrics.jsonl
(averages over the run's steps). Rounds alternate the order of the recipes; the table gives the
median over rounds, and each recipe's step time relative to AdamW's from the same round.

  python3 bench/optim_step.py [--steps 250] [--rounds 3] [--threads 2]

Shampoo's recipe recomputes its roots every 50 steps, so 250 steps include 5 root computations
(its amortised cost is in the optimiser phase).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from ddp_scaling import DATA, ROOT, log, small_test_set

RECIPES = {"sgd": "fashion_mnist.yaml", "adamw": "fashion_mnist_adamw.yaml", "lars": "fashion_mnist_lars.yaml",
           "lamb": "fashion_mnist_lamb.yaml", "shampoo": "fashion_mnist_shampoo.yaml"}


def run(args, data_root, name):
    out_dir = tempfile.mkdtemp(prefix="optim_step_")
    cmd = [os.path.join(args.build, "launch", "dptrain"), "--config", os.path.join(ROOT, "configs", RECIPES[name]),
           "--set", f"run.max_steps={args.steps}", "--set", f"run.log_every={args.steps}",
           "--set", f"run.threads={args.threads}", "--set", "run.epochs=1", "--set", f"run.output_dir={out_dir}",
           "--set", f"data.root={data_root}", "--set", "data.eval_batch_size=250"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900)
    recs = [json.loads(l) for l in open(os.path.join(out_dir, "metrics.jsonl")) if l.startswith("{")]
    shutil.rmtree(out_dir, ignore_errors=True)
    phases = [r for r in recs if r["event"] == "step"][-1]["ms_per_step"]
    return {"step_ms": sum(phases.values()), "optimizer_ms": phases["optimizer"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--optimizers", default=",".join(RECIPES))
    args = ap.parse_args()
    names = args.optimizers.split(",")
    if "adamw" not in names:
        ap.error("--optimizers must include adamw (the reference of the ratio column)")
    data_root = small_test_set(DATA, 250)
    rounds = []
    try:
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            rounds.append({n: run(args, data_root, n) for n in order})
            log(f"round {r + 1}/{args.rounds}: " +
                ", ".join(f"{n} {rounds[-1][n]['step_ms']:.1f} ms" for n in names))
    finally:
        shutil.rmtree(data_root, ignore_errors=True)
    print("| optimiser | step ms | optimiser phase ms | step time vs AdamW |")
    print("|---|---:|---:|---:|")
    for n in names:
        step = statistics.median(x[n]["step_ms"] for x in rounds)
        opt = statistics.median(x[n]["optimizer_ms"] for x in rounds)
        ratio = statistics.median(x[n]["step_ms"] / x["adamw"]["step_ms"] for x in rounds)
        print(f"| {n} | {step:.1f} | {opt:.2f} | {ratio:.2f}× |")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What checkpointing costs a training run, measured directly: the same run with and without
`run.checkpoint_every`, alternated over rounds so that drift on a shared machine hits both alike.

  python3 bench/checkpoint_cost.py --data /tmp/fmnist32 [--steps 60] [--every 20] [--rounds 2]
                                   [--build build] [--set KEY=VALUE ...]

The default run is the README's ResNet-50 recipe on a Fashion-MNIST JPEG folder at 32x32
(build/launch/make_image_folder --source fashion_mnist --out /tmp/fmnist32 --size 32), batch 128,
2 threads. The save is synchronous (rank 0 writes while the others wait at their next
collective), so what a save costs is the time it takes; the step profiler counts it as the
`checkpoint` phase, amortised over the steps (metrics.jsonl `ms_per_step.checkpoint`).

Prints, per round: the checkpointed run's step time split (the profiler's phases, last record of
the run), the saves and their "written in" times, and as a cross-check both runs' wall times and
the wall difference per save (noisy: on this shared machine two identical runs can differ by more
than a save). Then the overhead the measured per-save cost means when saving every 100 and every
1000 steps.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return wall, proc.stdout + proc.stderr


def phases(metrics_path):
    """The step-time split of the run's last step record (averages over its epoch so far)."""
    with open(metrics_path) as f:
        recs = [json.loads(line) for line in f if '"event":"step"' in line]
    if not recs:
        sys.exit(f"{metrics_path}: no step record")
    return recs[-1]["ms_per_step"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--data", required=True, help="an ImageNet-format JPEG folder (train/, val/)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=20)  # at least two saves before the last step
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="more config overrides")
    args = ap.parse_args()
    if (args.steps - 1) // args.every < 1:
        sys.exit("--steps must leave room for a save before the last step (steps > every)")

    base = [os.path.join(args.build, "launch", "dptrain"), "--config", os.path.join(HERE, "..", "configs", "resnet50.yaml")]
    overrides = [f"data.root={args.data}", "run.device=cpu", "run.precision=fp32", "model.num_classes=10",
                 f"data.batch_size={args.batch}", "data.image_size=32", "data.eval_resize_size=32",
                 "data.eval_image_size=32", "run.eval_every=1000", "run.target_accuracy=0",
                 f"run.threads={args.threads}", "data.loader_threads=1", f"run.max_steps={args.steps}",
                 "run.log_every=10"] + args.set
    for o in overrides:
        base += ["--set", o]

    tmp = tempfile.mkdtemp(prefix="dptrain_checkpoint_cost_")
    rows = []
    try:
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
            out_a, out_b = os.path.join(tmp, f"a{r}"), os.path.join(tmp, f"b{r}")
            wall_a, _ = run(base + ["--set", f"run.output_dir={out_a}"])
            wall_b, log_b = run(base + ["--set", f"run.output_dir={out_b}", "--set", f"run.checkpoint_every={args.every}",
                                        "--set", "run.keep_checkpoints=1"])
            saves = [(float(mb), float(s)) for mb, s in re.findall(r"checkpoint \S+ \(step \d+, ([\d.]+) MB, written in ([\d.]+) s\)", log_b)]
            if not saves:
                sys.exit("the checkpointed run printed no 'checkpoint ... written in' line:\n" + log_b[-3000:])
            split = phases(os.path.join(out_b, "metrics.jsonl"))
            rows.append({"wall_a": wall_a, "wall_b": wall_b, "saves": len(saves), "mb": saves[0][0],
                         "written_s": statistics.mean(s for _, s in saves), "checkpoint_ms": split["checkpoint"],
                         "train_ms": sum(v for k, v in split.items() if k != "checkpoint")})
            shutil.rmtree(out_a, ignore_errors=True)
            shutil.rmtree(out_b, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"| round | steps | saves (every {args.every}) | MB | written in s | step ms without saves | "
          f"checkpoint ms per step | overhead | wall without / with s | wall diff per save s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for i, row in enumerate(rows):
        diff = (row["wall_b"] - row["wall_a"]) / row["saves"]
        print(f"| {i + 1} | {args.steps} | {row['saves']} | {row['mb']:.1f} | {row['written_s']:.2f} | "
              f"{row['train_ms']:.0f} | {row['checkpoint_ms']:.1f} | {100 * row['checkpoint_ms'] / row['train_ms']:.1f} % | "
              f"{row['wall_a']:.1f} / {row['wall_b']:.1f} | {diff:.2f} |")
    # The last step record is written before a save at the same step: that save is not in it.
    in_record = (args.steps - 1) // args.every
    per_save = statistics.median(row["checkpoint_ms"] * args.steps / in_record for row in rows) / 1000
    step = statistics.median(row["train_ms"] for row in rows) / 1000
    for n in (100, 1000):
        print(f"saving every {n} steps: +{100 * per_save / (n * step):.2f} % step time "
              f"({per_save:.2f} s a save, {step * 1000:.0f} ms a step)")

if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Runs dptrain's and PyTorch's CPU benchmarks back to back (same machine, same run) and prints
the ratios as a Markdown table: dptrain time / PyTorch time (lower is better; goal ≤ 0.75) and
GEMM throughput as a fraction of OpenBLAS through PyTorch.

  python3 bench/compare_cpu.py [--build build] [--threads 2] [--iters 20] [--rounds 3]
                               [--precision fp32,bf16] [--formats nchw,channels_last]
                               [--only small_cnn_b128]

--precision lists the step precisions to compare: fp32, and bf16 (autocast on both sides).
--formats lists the memory formats (channels_last cases are suffixed _cl, on both sides).

Rounds alternate the two programs so drift on a shared machine hits both alike; the table
reports the median over rounds of each side's median step time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precision", default="fp32,bf16", help="comma-separated: fp32, bf16")
    ap.add_argument("--formats", default="nchw", help="comma-separated: nchw, channels_last")
    ap.add_argument("--only", help="the one training case to run (default all)")
    args = ap.parse_args()

    torch_env = dict(os.environ)
    torch_env.pop("OPENBLAS_CORETYPE", None)
    torch_env.pop("OPENBLAS_L2_SIZE", None)
    precisions = args.precision.split(",")
    only = [args.only] if args.only else []
    torch_cmds, ours_cmds = [], []
    for prec in precisions:
        for fmt in args.formats.split(","):
            first = fmt == args.formats.split(",")[0]
            torch_cmds.append(["/usr/bin/python3", os.path.join(HERE, "torch_reference.py"), "--threads",
                               str(args.threads), "--iters", str(args.iters), "--precision", prec,
                               "--memory-format", fmt] +
                              [a for name in only for a in ("--only", name)] +
                              (["--only", "sgemm_2048"] if only and prec == "fp32" and first else []))
            ours_cmds.append([os.path.join(args.build, "bench", "train_step_bench"), "--threads", str(args.threads),
                              "--iters", str(args.iters), "--precision", prec, "--memory-format", fmt] +
                             [a for name in only for a in ("--only", name)])
    gemm_cmd = [os.path.join(args.build, "bench", "gemm_bench"), "--threads", str(args.threads)]

    torch_ms, ours_ms, torch_gemm, ours_gemm = {}, {}, [], {}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
        for torch_cmd, ours_cmd in zip(torch_cmds, ours_cmds):
            for rec in run_json(torch_cmd, torch_env):
                if rec["name"].startswith("sgemm"):
                    torch_gemm.append(rec["gflops"])
                else:
                    torch_ms.setdefault(rec["name"], []).append(rec["median_ms"])
            for rec in run_json(ours_cmd):
                ours_ms.setdefault(rec["name"], []).append(rec["median_ms"])
        for rec in run_json(gemm_cmd):
            ours_gemm.setdefault(rec["name"], []).append(rec["gflops"])

    print(f"| case ({args.threads} threads) | dptrain ms | PyTorch 1.13 ms | ratio |")
    print("|---|---|---|---|")
    for name in torch_ms:
        if name not in ours_ms:
            continue
        o, t = statistics.median(ours_ms[name]), statistics.median(torch_ms[name])
        print(f"| {name} | {o:.1f} | {t:.1f} | {o / t:.2f} |")
    tg = statistics.median(torch_gemm) if torch_gemm else float("nan")
    for name, values in ours_gemm.items():
        g = statistics.median(values)
        print(f"| {name} GFLOP/s | {g:.0f} | {tg:.0f} (torch.mm) | {g / tg:.2f} of OpenBLAS |")


if __name__ == "__main__":
    main()

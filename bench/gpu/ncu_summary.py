#!/usr/bin/env python3
"""Where a training step's GPU time goes, from an Nsight Compute CSV (the GPU proof's profile step).

    ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw \\
        --log-file step.csv PROGRAM ... --profile-steps N
    python3 bench/gpu/ncu_summary.py step.csv --steps N [--top 25] [--label dptrain]

The programs (train_step_bench --profile-steps, torch_gpu_step.py --profile-steps) call
cudaProfilerStart/Stop around N steps after their warm-up, so the CSV holds those steps' kernels
only. ncu serialises the kernels and times each alone: the sum is the step's GPU busy time without
overlap, which is what the kernel-by-kernel comparison needs (the wall-clock step time comes from
the timed runs). Reads both of ncu's CSV shapes: `--page raw` (one column per metric, a units row
under the header) and `--page details` (one row per metric).
"""
import argparse
import csv
import re
import sys
from collections import defaultdict

UNIT_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
METRIC = "gpu__time_duration.sum"


def number(text):
    return float(text.replace(",", "").strip())


def kernel_times(lines):
    """[(kernel name, ns)] from ncu's CSV output (other lines, such as ==PROF== ones, are skipped)."""
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no CSV header (a line starting with \"ID\") in ncu's output")
    rows = list(csv.reader(l for l in lines[start:] if l.startswith('"')))
    header, body = rows[0], rows[1:]
    name_col = next((header.index(c) for c in ("Kernel Name", "Function Name", "Name") if c in header), None)
    if name_col is None:
        raise ValueError(f"no kernel-name column in ncu's CSV header: {header}")
    out = []
    if METRIC in header:  # --page raw
        col = header.index(METRIC)
        scale = 1.0
        if body and body[0][0] == "":  # the units row
            scale = UNIT_NS.get(body[0][col].strip(), 1.0)
            body = body[1:]
        for r in body:
            if len(r) > col and r[col].strip():
                out.append((r[name_col], number(r[col]) * scale))
    elif "Metric Name" in header:  # --page details
        m, u, v = header.index("Metric Name"), header.index("Metric Unit"), header.index("Metric Value")
        for r in body:
            if len(r) > v and r[m] in (METRIC, "Duration"):
                out.append((r[name_col], number(r[v]) * UNIT_NS.get(r[u].strip(), 1.0)))
    else:
        raise ValueError(f"ncu's CSV has neither a {METRIC} column nor Metric Name rows")
    return out


def short(name, width=110):
    """A kernel's name without its argument list, cut to `width`."""
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the first '(' outside template brackets starts the arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            cut = i
            break
    name = re.sub(r"^void ", "", name[:cut])
    return name if len(name) <= width else name[: width - 3] + "..."


def family(name):
    low = name.lower()
    if "batch_norm" in low or "batchnorm" in low or "bn_" in low:  # before cuDNN: its BN kernels
        return "batch norm"
    if any(k in low for k in ("cudnn", "xmma", "cutlass", "convolve", "wgrad", "dgrad", "fprop")):
        return "convolution / GEMM libraries (cuDNN, cuBLAS, CUTLASS)"
    if any(k in low for k in ("gemm", "cublas", "sm90_", "sm80_", "nvjet")):
        return "convolution / GEMM libraries (cuDNN, cuBLAS, CUTLASS)"
    if "multi_tensor" in low or "sgd" in low or "adam" in low or "optim" in low:
        return "optimiser"
    if "reduce" in low:
        return "reductions"
    if "pool" in low:
        return "pooling"
    return "pointwise, copies and the rest"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", help="ncu --csv output (--log-file)")
    p.add_argument("--steps", type=int, default=1, help="steps the capture covers (per-step figures)")
    p.add_argument("--top", type=int, default=25, help="kernels to list (default 25)")
    p.add_argument("--label", default="", help="a title for the table")
    args = p.parse_args()
    with open(args.csv, errors="replace") as f:
        lines = f.read().splitlines()
    try:
        times = kernel_times(lines)
    except ValueError as e:
        print(f"ncu_summary.py: {args.csv}: {e}", file=sys.stderr)
        return 1
    if not times:
        print(f"ncu_summary.py: {args.csv}: no kernel was captured", file=sys.stderr)
        return 1
    by_name, calls, by_family = defaultdict(float), defaultdict(int), defaultdict(float)
    for name, ns in times:
        key = short(name)
        by_name[key] += ns
        calls[key] += 1
        by_family[family(name)] += ns
    total = sum(by_name.values())
    steps = max(args.steps, 1)
    title = f"{args.label}: " if args.label else ""
    print(f"{title}{total / steps / 1e6:.3f} ms of kernels per step, {len(times) / steps:.0f} launches per step "
          f"({steps} step(s) captured, kernels timed one at a time)")
    for fam, ns in sorted(by_family.items(), key=lambda kv: -kv[1]):
        print(f"  {100 * ns / total:5.1f} %  {ns / steps / 1e6:8.3f} ms  {fam}")
    print(f"  {'share':>6}  {'ms/step':>8}  {'calls':>5}  kernel")
    for key, ns in sorted(by_name.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {100 * ns / total:5.1f} %  {ns / steps / 1e6:8.3f}  {calls[key] / steps:5.1f}  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PyTorch side of the GPU training-step benchmark (pairs with train_step_bench --device cuda).

One step = zero_grad(set_to_none), forward, cross-entropy, backward, SGD (lr 0.01, momentum 0.9;
PyTorch's default foreach implementation on CUDA), on fixed random inputs already on the GPU. The
models are bench/torch_reference.py's (SmallCNN, the MLP, torchvision's resnet18 with 10 classes:
dptrain's models/resnet.h builds torchvision's layout, 7x7 stem and max-pool included).

Settings, as a PyTorch user would train in float32 on Hopper: TF32 allowed for matmuls and
convolutions (dptrain: --tf32), torch.backends.cudnn.benchmark = True (dptrain: cudnn_benchmark,
on by default); each case in NCHW and in channels_last, as train_step_bench runs each (its
--memory-format channels_last cases are named <case>_cl).

Timing: --warmup untimed steps, then --iters samples; a sample is --block steps queued back to back
between two CUDA events, its time divided by --block. Median and min over the samples, in ms per
step. One JSON object per line on stdout.

  python3 bench/gpu/torch_gpu_step.py [--warmup 20] [--iters 20] [--block 10] [--only NAME ...]
  python3 bench/gpu/torch_gpu_step.py table --dptrain dptrain.jsonl --torch torch.jsonl
"""
import argparse
import json
import os
import statistics
import sys

# name -> input shape (batch first); the model factories come from bench/torch_reference.py.
CASES = {
    "small_cnn_b128": (1, 28, 28, 128),
    "mlp_b256": (1, 28, 28, 256),
    "resnet18_b32": (3, 32, 32, 32),
    "resnet18_b256": (3, 32, 32, 256),
    "resnet50_224_b8": (3, 224, 224, 8),
    "resnet50_224_b128": (3, 224, 224, 128),  # run only when --only names it (as train_step_bench)
}
ON_REQUEST = {"resnet50_224_b128"}
PRECISIONS = ("fp32", "bf16", "fp16")
FORMATS = ("nchw", "channels_last")


def enable_tf32(torch):
    """TF32 for float32 matmuls and convolutions; returns a description of what was set."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):  # PyTorch >= 2.9 (the allow_tf32 flags are deprecated)
        matmul.fp32_precision = "tf32"
        torch.backends.cudnn.conv.fp32_precision = "tf32"
        return "fp32_precision=tf32 (matmul, cudnn.conv)"
    matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return "allow_tf32=True (matmul, cudnn)"


def model_for(name):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import torch_reference  # bench/torch_reference.py

    factory = {"small_cnn": torch_reference.SmallCNN, "mlp": torch_reference.mlp,
               "resnet18": torch_reference.resnet18, "resnet50_224": torch_reference.resnet50}[name.rsplit("_b", 1)[0]]
    return factory()


def bench_case(torch, name, fmt, warmup, iters, block, precision="fp32", profile_steps=0):
    import torch.nn.functional as F

    c, h, w, n = CASES[name]
    torch.manual_seed(0)
    memory_format = torch.channels_last if fmt == "channels_last" else torch.contiguous_format
    model = model_for(name).cuda().to(memory_format=memory_format)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(n, c, h, w, device="cuda").contiguous(memory_format=memory_format)
    y = (torch.arange(n, device="cuda") % 10).long()

    # Autocast as train_step_bench --precision: forward and loss in bf16/fp16, float32 weights, no
    # loss scaling (the step time is the point).
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=autocast_dtype, enabled=autocast_dtype is not None):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    suffix = "" if precision == "fp32" else "_" + precision
    if profile_steps:  # for ncu --profile-from-start off, as train_step_bench --profile-steps
        torch.cuda.cudart().cudaProfilerStart()
        for _ in range(profile_steps):
            step()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        return {"name": name + suffix, "format": fmt, "profiled_steps": profile_steps, "warmup": warmup}
    ms = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(iters):
        start.record()
        for _ in range(block):
            step()
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end) / block)
    return {"name": name + suffix, "format": fmt, "median_ms": round(statistics.median(ms), 4), "min_ms": round(min(ms), 4),
            "iters": iters, "block": block, "warmup": warmup}


def run_bench(args):
    try:
        import torch
    except ImportError as e:
        print(f"torch_gpu_step.py: PyTorch is not installed for {sys.executable} ({e})", file=sys.stderr)
        return 2

    if not torch.cuda.is_available():
        print("torch_gpu_step.py: torch.cuda.is_available() is False: no GPU to time on", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    tf32 = enable_tf32(torch)
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "gpu": torch.cuda.get_device_name(0), "tf32": tf32, "cudnn_benchmark": True}
    print(json.dumps({"info": info}), flush=True)
    for name in args.only or [n for n in CASES if n not in ON_REQUEST]:
        for precision in args.precisions.split(","):
            for fmt in args.formats.split(","):
                r = bench_case(torch, name, fmt, args.warmup, args.iters, args.block, precision, args.profile_steps)
                r["torch"] = torch.__version__
                print(json.dumps(r), flush=True)
    return 0


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return rows


def run_table(args):
    """The comparison table: dptrain's median ms per step next to PyTorch's, and their ratio."""
    dp = {r["name"]: r for r in read_jsonl(args.dptrain) if "name" in r} if os.path.exists(args.dptrain) else {}
    th = {}
    if os.path.exists(args.torch):
        for r in read_jsonl(args.torch):
            if "name" in r:
                th[(r["name"], r.get("format", "nchw"))] = r
    # Case names in order, with a precision suffix where one was run ("resnet50_224_b128_bf16").
    variants = [n + s for n in CASES for s in ("",) + tuple("_" + p for p in PRECISIONS[1:])]
    names = [n for n in variants if n in dp or n + "_cl" in dp or any(k[0] == n for k in th)]
    if not names:
        print("no timings (neither side produced any)")
        return 1

    def ms(r):
        return f"{r['median_ms']:.3f}" if r else "-"

    def ratio(a, b):
        return f"{a['median_ms'] / b['median_ms']:.2f}" if a and b and b["median_ms"] > 0 else "-"

    # train_step_bench --cuda-graphs: channels-last steps replayed as one CUDA graph ("<case>_cl_graph"),
    # against PyTorch's eager channels-last step (images/s speed-up = torch ms / dptrain graph ms).
    graphs = any(n + "_cl_graph" in dp for n in names)
    head = ("case", "dptrain NCHW ms", "dptrain CL ms", "torch NCHW ms", "torch CL ms", "NCHW ratio", "CL ratio")
    if graphs:
        head += ("dptrain CL graph ms", "CL graph ratio", "graph img/s vs torch")
    rows = []
    for n in names:
        d, dc, a, b = dp.get(n), dp.get(n + "_cl"), th.get((n, "nchw")), th.get((n, "channels_last"))
        row = (n, ms(d), ms(dc), ms(a), ms(b), ratio(d, a), ratio(dc, b))
        if graphs:
            g = dp.get(n + "_cl_graph")
            row += (ms(g), ratio(g, b), f"{b['median_ms'] / g['median_ms']:.2f}x" if g and b and g["median_ms"] > 0 else "-")
        rows.append(row)
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(str(v).rjust(w) if i else str(v).ljust(w) for i, (v, w) in enumerate(zip(r, widths))))
    print("(median ms per training step, float32 with TF32 (_bf16/_fp16: forward and loss under autocast), "
          "cudnn benchmark; CL = channels_last; "
          "ratio = dptrain / torch in the same format, > 1 means dptrain is slower" +
          ("; graph: dptrain's step replayed as one CUDA graph, torch eager)" if graphs else ")"))
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "table":
        p = argparse.ArgumentParser(prog="torch_gpu_step.py table")
        p.add_argument("--dptrain", required=True, help="train_step_bench --device cuda output (JSON lines)")
        p.add_argument("--torch", required=True, help="this script's output (JSON lines)")
        return run_table(p.parse_args(sys.argv[2:]))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first (default 20)")
    p.add_argument("--iters", type=int, default=20, help="timed samples (default 20)")
    p.add_argument("--block", type=int, default=10, help="steps per sample (default 10)")
    p.add_argument("--only", choices=list(CASES), action="append", help="run just this case (repeatable)")
    p.add_argument("--formats", default=",".join(FORMATS), help="comma-separated: nchw, channels_last")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="after --warmup, run this many steps between cudaProfilerStart/Stop instead of timing")
    p.add_argument("--precisions", default="fp32", help="comma-separated: fp32, bf16, fp16 (autocast; default fp32)")
    return run_bench(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())

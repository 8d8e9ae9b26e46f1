#!/usr/bin/env python3
"""Data-parallel scaling benchmark (issue 3): dptrain over MPI next to PyTorch DDP (gloo).

For each model (SmallCNN, per-rank batch 64; ResNet-18, per-rank batch 32) it measures, with
1 thread per rank on this 2-core machine:
  - dptrain on 1 rank (`build/launch/dptrain`, global batch B) and on 2 ranks
    (`mpirun -np 2 --oversubscribe --allow-run-as-root --bind-to none`, global batch 2B):
    steady-state throughput, and for 2 ranks the reducer's communication figures
    (comm ms/step, exposed ms/step, % hidden) from metrics.jsonl;
  - PyTorch 1.13 the same: 1 process (plain model, no DDP) and 2 processes under
    DistributedDataParallel with the gloo backend (defaults: 25 MiB buckets), SGD lr 0.05,
    momentum 0.9, torch.set_num_threads(1);
  - scaling efficiency = throughput(2 ranks) / (2 × throughput(1 rank)).
It prints a Markdown table. Every measurement is repeated --rounds times, alternating which
system goes first, and the table shows medians over rounds (efficiency: the median of each
round's efficiency, so a 1-rank and a 2-rank run close together in time are compared).

  python3 bench/ddp_scaling.py [--rounds 3] [--steps 50] [--warmup 10] [--bucket-sweep 4,1]

How each side is measured
  dptrain: real Fashion-MNIST (/usr/share/datasets/fashion-mnist). Runs use run.max_steps=--steps
    and run.log_every=10; the first --warmup steps are dropped and throughput is the harmonic mean
    of the later 10-step windows' global samples/s (total samples / total time). The test set is
    replaced by its first --test-samples images (a gzipped IDX copy in a temp folder; training
    files are symlinks to the real ones) so the end-of-run evaluation costs next to nothing.
    comm/exposed/% hidden: the reducer's per-window figures averaged over the same windows.
    Note: comm_ms is the wall-clock span from the first bucket's launch to the last bucket's
    completion (or the end of backward), so it counts backward compute that runs alongside;
    exposed_ms is the time finish() waited after backward.
  PyTorch: synthetic data (a pool of 4 fixed random batches, normalised like the real data;
    the data cost is a tensor index). 2 processes come from torch.multiprocessing.spawn inside a
    subprocess of this script (`--torch-worker`), rendezvous over 127.0.0.1 on a free port;
    OMP_NUM_THREADS=1 and set_num_threads/set_num_interop_threads(1). After --warmup steps and a
    barrier, --steps − --warmup steps are timed between two barriers. DDP exposes no overlap
    figures, so the PyTorch comm column is a gloo all_reduce of a flat buffer of all gradients
    timed alone (no compute beside it), exposed ≈ 2-rank step time − 1-rank step time, and
    % hidden ≈ 1 − exposed / comm (estimates; marked ≈).
  Both: "step ms" is the time of one step of one rank (per-rank batch / per-rank throughput);
    on 2 ranks with 1 thread each on 2 cores the per-rank compute equals the 1-rank case, so
    ideal scaling is 2× and any step-time increase is communication or contention.
  The ResNet-18 of both systems is torchvision's layout with 10 classes and a 1-channel
    7×7/2 stem (models/resnet.cpp); the SmallCNN is models/small_cnn.cpp.

--bucket-sweep 4,1 adds dptrain ResNet-18 rows with distributed.bucket_mb=4 and 1 (2 ranks; the
1-rank baseline is the default row's, since bucket size does not matter on one rank).

The dptrain side uses only the standard library. PyTorch runs under Debian's /usr/bin/python3
with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE removed from the environment, as in compare_cpu.py.
"""
import argparse
import gzip
import json
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = "/usr/share/datasets/fashion-mnist"
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none"]
STEP_RE = re.compile(r"step (\d+)/(\d+)\s+loss \S+\s+lr \S+\s+([\d.]+) samples/s")
BUCKETS_RE = re.compile(r"(\d+) gradient buckets")
WINDOW = 10  # dptrain redraws its progress every min(log_every, 10) steps on a terminal (mpirun gives a pty)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------- dptrain


def small_test_set(root, n):
    """A data root whose training files are the real ones and whose test set is the first n images."""
    d = tempfile.mkdtemp(prefix="ddp_scaling_data_")
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        os.symlink(os.path.join(root, name), os.path.join(d, name))
    with gzip.open(os.path.join(root, "t10k-images-idx3-ubyte.gz"), "rb") as f:
        magic, count, rows, cols = struct.unpack(">IIII", f.read(16))
        n = min(n, count)
        pixels = f.read(n * rows * cols)
    with gzip.open(os.path.join(d, "t10k-images-idx3-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">IIII", magic, n, rows, cols) + pixels)
    with gzip.open(os.path.join(root, "t10k-labels-idx1-ubyte.gz"), "rb") as f:
        magic, count = struct.unpack(">II", f.read(8))
        labels = f.read(n)
    with gzip.open(os.path.join(d, "t10k-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">II", magic, n) + labels)
    return d


def harmonic(xs):
    return len(xs) / sum(1.0 / x for x in xs)


def run_dptrain(args, data_root, model, ranks, per_rank_batch, extra=()):
    out_dir = tempfile.mkdtemp(prefix="ddp_scaling_run_")
    cmd = [os.path.join(args.build, "launch", "dptrain"), "--config", os.path.join(ROOT, "configs", "fashion_mnist.yaml"),
           "--set", f"model.name={model}", "--set", f"data.batch_size={per_rank_batch * ranks}",
           "--set", "run.threads=1", "--set", "run.epochs=1", "--set", f"run.max_steps={args.steps}",
           "--set", f"run.log_every={WINDOW}", "--set", f"run.output_dir={out_dir}",
           "--set", f"data.root={data_root}", "--set", "data.eval_batch_size=250"]
    for kv in extra:
        cmd += ["--set", kv]
    if ranks > 1:
        cmd = MPIRUN + ["-np", str(ranks)] + cmd
    for attempt in range(3):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode == 0:
            break
        # Another session may be relinking build/launch/dptrain: wait and retry.
        log(f"dptrain failed (rc {p.returncode}), retrying in 20 s:\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
        time.sleep(20)
    else:
        raise RuntimeError("dptrain kept failing: " + " ".join(cmd))
    text = p.stdout.replace("\r", "\n")
    console = {}
    for m in STEP_RE.finditer(text):
        step, steps_per_epoch, sps = int(m.group(1)), int(m.group(2)), float(m.group(3))
        if args.steps >= steps_per_epoch:
            raise RuntimeError("--steps must stay inside one epoch")
        console[step] = sps
    recs = [json.loads(l) for l in open(os.path.join(out_dir, "metrics.jsonl")) if l.startswith("{")]
    steps = [r for r in recs if r["event"] == "step" and r["step"] > args.warmup]
    end = [r for r in recs if r["event"] == "end"][0]
    shutil.rmtree(out_dir, ignore_errors=True)
    if not steps:
        raise RuntimeError("no step records after the warm-up: raise --steps")
    # Global samples/s per window; the console's progress figure must agree.
    sps = [r["samples_per_second"] for r in steps]
    note = ""
    console_sps = [console.get(r["step"]) for r in steps]
    if all(c is not None for c in console_sps):
        ratio = statistics.median(m / c for m, c in zip(sps, console_sps))
        if abs(ratio - 1) > 0.02:
            note = f"metrics.jsonl samples_per_second = {ratio:.2f} × console (global) figure"
    result = {"sps": harmonic(sps), "windows": sps, "note": note,
              "phases": steps[-1]["ms_per_step"]}
    m = BUCKETS_RE.search(text)
    if m:
        result["buckets"] = int(m.group(1))
    comm = [r["comm"] for r in steps if "comm" in r]
    if comm:
        c = sum(x["comm_ms"] for x in comm) / len(comm)
        e = sum(x["exposed_ms"] for x in comm) / len(comm)
        result.update(comm_ms=c, exposed_ms=e, hidden_pct=100.0 * (1 - e / c) if c > 0 else 100.0,
                      run_comm=end.get("comm"))
    return result


# ---------------------------------------------------------------------------------------- PyTorch


def torch_model(name):
    import torch.nn as nn
    if name == "small_cnn":
        from torch_reference import SmallCNN  # models/small_cnn.cpp
        return SmallCNN()
    if name == "resnet18":
        import torchvision  # models/resnet.cpp: torchvision's layout, stem with the data's 1 channel
        m = torchvision.models.resnet18(num_classes=10)
        m.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
        return m
    raise ValueError(name)


def torch_rank(rank, world, port, model_name, batch, steps, warmup, result_path):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    if world > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch_model(model_name)
    model.train()
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)  # 25 MiB buckets, like dptrain's default
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1 + rank)
    xs = [torch.randn(batch, 1, 28, 28, generator=g) for _ in range(4)]
    ys = [torch.randint(0, 10, (batch,), generator=g) for _ in range(4)]

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xs[i % 4]), ys[i % 4])
        loss.backward()
        opt.step()

    for i in range(warmup):
        step(i)
    if world > 1:
        dist.barrier()
    t0 = time.perf_counter()
    for i in range(warmup, steps):
        step(i)
    if world > 1:
        dist.barrier()
    seconds = time.perf_counter() - t0
    res = {"sps": (steps - warmup) * batch * world / seconds}
    if world > 1:
        # gloo all-reduce of all gradients at once, nothing else running: the communication cost.
        n = sum(p.numel() for p in model.parameters())
        buf = torch.ones(n)
        ms = []
        for _ in range(6):
            dist.barrier()
            t = time.perf_counter()
            dist.all_reduce(buf)
            ms.append((time.perf_counter() - t) * 1e3)
        res["allreduce_ms"] = statistics.median(ms[1:])
        dist.barrier()
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(res, f)
    if world > 1:
        # No destroy_process_group(): with torch 1.13's gloo it can deadlock at shutdown (rank 0
        # was seen waiting on a lock in ProcessGroupGloo's teardown for minutes after its last
        # collective). Every collective is done, so leave at once.
        os._exit(0)


def torch_worker(args):
    fd, path = tempfile.mkstemp(prefix="ddp_scaling_torch_", suffix=".json")
    os.close(fd)
    if args.ranks == 1:
        torch_rank(0, 1, 0, args.model, args.batch, args.steps, args.warmup, path)
    else:
        import torch.multiprocessing as mp
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(torch_rank, args=(args.ranks, port, args.model, args.batch, args.steps, args.warmup, path),
                 nprocs=args.ranks, join=True)
    with open(path) as f:
        print(json.dumps(json.load(f)), flush=True)
    os.unlink(path)


def run_torch(args, model, ranks, per_rank_batch):
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    env["OMP_NUM_THREADS"] = "1"
    cmd = ["/usr/bin/python3", os.path.abspath(__file__), "--torch-worker", "--model", model, "--ranks", str(ranks),
           "--batch", str(per_rank_batch), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"PyTorch worker failed:\n{p.stderr[-3000:]}")
    return json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])


# ---------------------------------------------------------------------------------------- driver


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default="small_cnn,resnet18")
    ap.add_argument("--batch-small-cnn", type=int, default=64, help="per-rank batch of small_cnn (default 64)")
    ap.add_argument("--batch-resnet18", type=int, default=32, help="per-rank batch of resnet18 (default 32)")
    ap.add_argument("--steps", type=int, default=50, help="steps per run (default 50)")
    ap.add_argument("--warmup", type=int, default=10, help="leading steps not timed (default 10; a multiple of 10)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--systems", default="dptrain,torch")
    ap.add_argument("--bucket-sweep", default=None, metavar="MB,MB",
                    help="extra dptrain ResNet-18 2-rank rows with these distributed.bucket_mb values")
    ap.add_argument("--test-samples", type=int, default=250, help="test images dptrain evaluates at the end")
    ap.add_argument("--json", default=None, help="also write every raw measurement here")
    # internal: one PyTorch measurement (run under /usr/bin/python3)
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--ranks", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(args)
    if args.warmup % WINDOW or args.steps <= args.warmup:
        ap.error(f"--warmup must be a multiple of {WINDOW} and below --steps")

    models = args.models.split(",")
    systems = args.systems.split(",")
    batch = {"small_cnn": args.batch_small_cnn, "resnet18": args.batch_resnet18}
    sweep = [float(x) for x in args.bucket_sweep.split(",")] if args.bucket_sweep else []
    data_root = small_test_set(DATA, args.test_samples)
    raw = {}  # (model, system) -> list of per-round dicts

    def measure(model, system):
        b = batch[model]
        if system == "dptrain":
            one = run_dptrain(args, data_root, model, 1, b)
            two = run_dptrain(args, data_root, model, 2, b)
            raw.setdefault((model, "dptrain"), []).append({"1": one, "2": two})
            if model == "resnet18":
                for mb in sweep:
                    s = run_dptrain(args, data_root, model, 2, b, [f"distributed.bucket_mb={mb:g}"])
                    raw.setdefault((model, f"dptrain bucket_mb={mb:g}"), []).append({"1": one, "2": s})
        else:
            one = run_torch(args, model, 1, b)
            two = run_torch(args, model, 2, b)
            raw.setdefault((model, "PyTorch DDP gloo"), []).append({"1": one, "2": two})
        log(f"  {model} {system}: 1 rank {one['sps']:.0f}, 2 ranks {two['sps']:.0f} samples/s"
            + (f", hidden {two['hidden_pct']:.1f} %" if "hidden_pct" in two else "")
            + (f"  [{two['note']}]" if two.get("note") else ""))

    t_start = time.time()
    try:
        for r in range(args.rounds):
            log(f"round {r + 1}/{args.rounds} ({time.time() - t_start:.0f} s, load average {os.getloadavg()[0]:.2f})")
            order = systems if r % 2 == 0 else systems[::-1]
            for model in models:
                for system in order:
                    measure(model, system)
    finally:
        shutil.rmtree(data_root, ignore_errors=True)
    log(f"done in {time.time() - t_start:.0f} s")

    print(f"| model (per-rank batch) | system | 1-rank samples/s | 2-rank samples/s | scaling eff. "
          f"| step ms 1 → 2 ranks | comm ms/step | exposed ms/step | % hidden |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    notes = set()
    for (model, system), rounds in raw.items():
        b = batch[model]
        s1 = med([x["1"]["sps"] for x in rounds])
        s2 = med([x["2"]["sps"] for x in rounds])
        eff = med([x["2"]["sps"] / (2 * x["1"]["sps"]) for x in rounds])
        t1, t2 = 1e3 * b / s1, 1e3 * 2 * b / s2
        for x in rounds:
            if x["2"].get("note"):
                notes.add(x["2"]["note"].split(" = ")[0] + " = ×" + x["2"]["note"].split(" = ")[1].split(" ")[0])
        if system.startswith("dptrain"):
            comm = med([x["2"].get("comm_ms") for x in rounds])
            exposed = med([x["2"].get("exposed_ms") for x in rounds])
            hidden = med([x["2"].get("hidden_pct") for x in rounds])
            buckets = rounds[0]["2"].get("buckets")
            label = system + (f" ({buckets} buckets)" if buckets else "")
            cells = [fmt(comm, ".1f"), fmt(exposed, ".1f"), fmt(hidden, ".1f")]
        else:
            comm = med([x["2"].get("allreduce_ms") for x in rounds])
            exposed = max(0.0, t2 - t1)
            hidden = 100.0 * max(0.0, 1 - exposed / comm) if comm else None
            label = system
            cells = [f"≈{comm:.1f} (alone)", f"≈{exposed:.1f}", f"≈{fmt(hidden, '.0f')}"]
        shown_s1 = "″" if "bucket_mb" in system else f"{s1:.0f}"
        print(f"| {model} ({b}) | {label} | {shown_s1} | {s2:.0f} | {eff:.2f} | {t1:.1f} → {t2:.1f} | "
              + " | ".join(cells) + " |")
    for n in sorted(notes):
        log("note: " + n)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"model": m, "system": s, "rounds": v} for (m, s), v in raw.items()], f, indent=1)


if __name__ == "__main__":
    main()

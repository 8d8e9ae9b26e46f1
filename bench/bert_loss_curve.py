#!/usr/bin/python3
"""Loss curve and step time of dptrain's BERT masked-LM training against PyTorch 1.13 on the same
data order, model initialisation and optimiser.

    env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/bert_loss_curve.py [--steps 200] [--work DIR]

1. Shards: `dptrain prepare-text --out <work>/fortunes` (the built-in corpus) unless they exist.
2. A BERT in Hugging Face's BertForMaskedLM layout with dptrain's parameter names (models/bert.h;
   the MLM decoder tied to the word embeddings), its size from model.size, the vocabulary from
   <shards>/vocab.txt, dropout 0, Hugging Face's init from --seed, written as safetensors
   (<work>/init.safetensors, by hand: Debian has no python3-safetensors).
3. dptrain trains from it: `dptrain --config CONFIG --set data.root=<shards> --set model.dropout=0
   --set model.init_from=<init> --set run.max_steps=N --set run.log_every=1 ...`; its per-step
   losses, lrs and phase times come from <work>/run/metrics.jsonl ("event": "step" records).
4. build/bench/dump_mlm_batches writes the same run's first N training batches (same config and
   overrides); PyTorch trains on them with launch/objectives.cpp's MaskedLmObjective: the
   encoder over every token (padding mask from sequence_ids, or the block-diagonal mask of packed
   rows), hidden states gathered at mlm_positions, the MLM head, sum(cross_entropy(reduction=
   'none') * mlm_weights); torch.optim.AdamW with the config's lr, betas, eps and weight decay on
   the parameters dptrain decays (optimizer.exclude_1d / exclude_names, optim/param_groups.cpp),
   the lr set before every step from dptrain's schedule (optim/lr_schedule.cpp: warmup steps =
   round(warmup_epochs x steps per epoch) from 0, then linear decay to min_lr over epochs x steps
   per epoch), zero_grad(set_to_none=True).
5. Prints step, dptrain loss, PyTorch loss, |diff| (every 10th step and the last), the largest
   |diff| over the first 20 steps and over all, the largest lr difference (dptrain's metrics
   against this script's schedule), the largest difference between dptrain's final weights
   (run.weights_file) and PyTorch's, and the median and 10th-percentile step time of each side
   (steps after the first 3); per-step figures go to <work>/steps.json.

Step times: dptrain's are its profiler's (the metrics' ms_per_step phases are averages since the
epoch began: step k's time is k x avg_k - (k-1) x avg_(k-1)), forward + backward + optimizer
(+ comm, 0 here) — the "model step" — and the same plus the data phase (waiting for the loader).
PyTorch's are wall clock from the forward to zero_grad, on batches already in memory, so the ratio
compares the model steps. Both run in this script, one after the other, with --threads threads:
on a shared machine other load changes between the two, and multithreaded steps are very
sensitive to it (compare steps.json, or rerun with --threads 1).
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True
import torch
import yaml
from torch.nn import functional as F

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# Google's BERT sizes, as BertConfig::preset (models/bert.cpp): layers, hidden; heads = hidden / 64,
# intermediate = 4 x hidden.
PRESETS = {"tiny": (2, 128), "mini": (4, 256), "small": (4, 512), "medium": (8, 512), "base": (12, 768),
           "large": (24, 1024)}


# The safetensors format by hand (Debian has no python3-safetensors): torchvision_interop's reader
# and writer, beside this script.
from torchvision_interop import read_safetensors, write_safetensors  # noqa: E402


# ---- BERT: the PyTorch reference of tests/fixtures/make_bert_fixtures.py (Hugging Face's module
# tree and names), as BertForMaskedLM (next_sentence false) without dropout -----------------------

sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
from make_bert_fixtures import BertForPreTraining  # noqa: E402


# ---- the objective: launch/objectives.cpp MaskedLmObjective ----------------------------------

MASKED = torch.finfo(torch.float32).min  # models/bert.cpp masked_value(float32)


def attention_mask(sequence_ids, packed):
    """padding_attention_mask / packed_attention_mask (models/bert.cpp)."""
    b, s = sequence_ids.shape
    if not packed:
        return ((sequence_ids == 0).to(torch.float32) * MASKED).view(b, 1, 1, s)
    same = (sequence_ids.view(b, s, 1) == sequence_ids.view(b, 1, s)).to(torch.float32)
    real_key = (sequence_ids != 0).to(torch.float32).view(b, 1, s)
    return ((1.0 - same * real_key) * MASKED).view(b, 1, s, s)


def mlm_loss(model, batch, packed):
    ids = batch["input_ids"]
    rows, length = ids.shape
    mask = attention_mask(batch["sequence_ids"], packed)
    hidden = model.bert.encode(ids, batch["token_type_ids"], mask, batch["position_ids"])
    picked = hidden.reshape(rows * length, hidden.shape[2]).index_select(0, batch["mlm_positions"].flatten())
    logits = model.cls.predictions(picked)
    per_slot = F.cross_entropy(logits, batch["mlm_labels"].flatten(), reduction="none")  # 0 on -100
    return (per_slot * batch["mlm_weights"].flatten()).sum()


# ---- dptrain's lr schedule (optim/lr_schedule.cpp) and decay groups (optim/param_groups.cpp) --

def make_lr_at(cfg, steps_per_epoch):
    s = cfg["schedule"]
    base = float(cfg["optimizer"]["lr"])
    total = int(cfg["run"]["epochs"]) * steps_per_epoch
    # std::llround: halves away from zero (Python's round() would round them to even)
    x = float(s["warmup_epochs"]) * steps_per_epoch
    warmup = int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))
    name, min_lr = s["name"], float(s["min_lr"])
    power = 1.0 if name == "linear" else float(s["power"])
    if name not in ("linear", "poly", "constant", "cosine"):
        raise SystemExit(f"bert_loss_curve: schedule.name {name} is not reproduced here (linear, poly, constant, cosine)")

    def lr_at(step):
        if step < warmup:
            return base * step / warmup
        if name == "constant":
            return base
        t = min(max((step - warmup) / (total - warmup), 0.0), 1.0)
        if name == "cosine":
            return min_lr + (base - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))
        return min_lr + (base - min_lr) * (1.0 - t) ** power

    return lr_at, warmup, total


def param_groups(model, cfg):
    o = cfg["optimizer"]
    exclude_1d = bool(o["exclude_1d"])
    names = [n for n in (o.get("exclude_names") or []) if n]
    kept, excluded = [], []
    for name, p in model.named_parameters():  # tied parameters once, under their first name (as dptrain)
        (excluded if (exclude_1d and p.dim() < 2) or any(n in name for n in names) else kept).append(p)
    groups = []
    if kept:
        groups.append({"params": kept, "weight_decay": float(o["weight_decay"])})
    if excluded:
        groups.append({"params": excluded, "weight_decay": 0.0})
    return groups, len(kept), len(excluded)


# ---- the two runs -----------------------------------------------------------------------------

def run(cmd, log_path=None):
    """Runs cmd in the repository root; its output goes to log_path, or is returned."""
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    if log_path:
        with open(log_path, "w") as log:
            p = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
        output = open(log_path).read()
    else:
        p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output = p.stdout
    if p.returncode != 0:
        raise SystemExit(f"bert_loss_curve: command failed (exit {p.returncode}):\n{output[-3000:]}")
    return time.perf_counter() - t0, output


def dptrain_steps(metrics_path):
    """Per-step loss, lr and time from the metrics file (log_every 1: a record per step)."""
    records = [json.loads(line) for line in open(metrics_path) if line.strip()]
    steps = [r for r in records if r.get("event") == "step"]
    out, prev_epoch, k = [], None, 0
    prev = {}
    for r in steps:
        if r["epoch"] != prev_epoch:  # the profiler restarts its averages every epoch
            prev_epoch, k, prev = r["epoch"], 0, {}
        k += 1
        ms = r["ms_per_step"]
        this = {p: ms[p] * k - prev.get(p, 0.0) * (k - 1) for p in ms}
        prev = ms
        model_ms = sum(this.get(p, 0.0) for p in ("forward", "backward", "comm", "optimizer"))
        out.append({"step": r["step"], "loss": r["loss"], "lr": r["lr"], "model_ms": model_ms,
                    "total_ms": model_ms + this.get("data", 0.0)})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--config", default="configs/bert_tiny.yaml")
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "bert_loss_curve"),
                    help="working folder: shards, init, batches, dptrain's run (default build/bert_loss_curve)")
    ap.add_argument("--shards", default="", help="existing token shards (default <work>/fortunes, made if missing)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed of the initialisation")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dptrain", default=os.path.join(ROOT, "build", "launch", "dptrain"))
    ap.add_argument("--dump", default=os.path.join(ROOT, "build", "bench", "dump_mlm_batches"))
    ap.add_argument("--set", action="append", default=[], metavar="section.key=value",
                    help="further config overrides, given to both dptrain and dump_mlm_batches")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.work, exist_ok=True)
    work = os.path.abspath(args.work)

    # 1. shards
    shards = os.path.abspath(args.shards) if args.shards else os.path.join(work, "fortunes")
    if not os.path.isfile(os.path.join(shards, "vocab.txt")):
        if args.shards:
            raise SystemExit(f"bert_loss_curve: {shards}/vocab.txt is missing")
        run([args.dptrain, "prepare-text", "--out", shards])

    # The resolved config, with every override both runs get.
    init_path = os.path.join(work, "init.safetensors")
    run_dir = os.path.join(work, "run")
    overrides = [f"data.root={shards}", "model.dropout=0", f"model.init_from={init_path}",
                 f"run.max_steps={args.steps}", "run.log_every=1", f"run.threads={args.threads}",
                 f"run.output_dir={run_dir}", "data.loader_threads=1", *args.set]
    set_args = [a for o in overrides for a in ("--set", o)]
    _, text = run([args.dptrain, "--config", args.config, *set_args, "--print-config"])
    cfg = yaml.safe_load(text)
    o = cfg["optimizer"]
    for what, ok in [("model.name bert", cfg["model"]["name"] == "bert"),
                     ("optimizer.name adamw", o["name"] == "adamw"),
                     ("optimizer.clip_grad_norm 0", float(o["clip_grad_norm"]) == 0),
                     ("run.precision fp32", cfg["run"]["precision"] == "fp32"),
                     ("run.device cpu", cfg["run"]["device"] == "cpu")]:
        if not ok:
            raise SystemExit(f"bert_loss_curve: this comparison reproduces {what} only")
    packed = cfg["data"]["packing"] == "greedy"

    # 2. the model and its initialisation
    with open(cfg["data"]["vocab"] or os.path.join(shards, "vocab.txt"), "rb") as f:  # as datasets.cpp
        vocab_lines = f.read().split(b"\n")
    vocab_size = len(vocab_lines) - (1 if vocab_lines[-1] == b"" else 0)  # as Vocabulary::load
    layers, hidden = PRESETS[cfg["model"]["size"]]
    max_seq = int(cfg["data"]["max_seq_length"]) or 128  # the shards' (prepare-text's default); checked below
    c = dict(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // 64,
             intermediate_size=4 * hidden, max_position_embeddings=max(512, max_seq), type_vocab_size=2,
             layer_norm_eps=1e-12, initializer_range=0.02, next_sentence=False, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0)
    torch.manual_seed(args.seed)
    model = BertForPreTraining(c)
    init_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    write_safetensors(init_path, init_state,
                      {"model": "BertForMaskedLM", "torch_version": torch.__version__, "seed": str(args.seed)})

    # 4a. the batches (dptrain's loader, same config and overrides)
    batches_path = os.path.join(work, "batches.safetensors")
    run([args.dump, "--config", args.config, *set_args, "--steps", str(args.steps), "--out", batches_path])
    flat, meta = read_safetensors(batches_path)
    if int(meta["vocab_size"]) != vocab_size or int(meta["max_position_embeddings"]) != c["max_position_embeddings"]:
        raise SystemExit(f"bert_loss_curve: dptrain's model has vocab {meta['vocab_size']} and "
                         f"{meta['max_position_embeddings']} positions, this one {vocab_size} and "
                         f"{c['max_position_embeddings']}")
    batches = [{} for _ in range(args.steps)]
    for name, t in flat.items():
        step, key = name.split(".", 1)
        batches[int(step[4:])][key] = t
    steps_per_epoch = int(meta["steps_per_epoch"])
    lr_at, warmup, total = make_lr_at(cfg, steps_per_epoch)

    # 3. dptrain
    if os.path.isdir(run_dir):
        shutil.rmtree(run_dir)  # this script's own folder: no earlier run's metrics or weights kept beside
    dp_wall, _ = run([args.dptrain, "--config", args.config, *set_args], log_path=os.path.join(work, "dptrain.log"))
    dp = dptrain_steps(os.path.join(run_dir, "metrics.jsonl"))
    if [r["step"] for r in dp] != list(range(1, args.steps + 1)):
        raise SystemExit(f"bert_loss_curve: expected step records 1..{args.steps} in {run_dir}/metrics.jsonl")

    # 4b. PyTorch on the same batches
    groups, n_decayed, n_excluded = param_groups(model, cfg)
    opt = torch.optim.AdamW(groups, lr=float(o["lr"]), betas=tuple(float(b) for b in o["betas"]), eps=float(o["eps"]))
    model.train()
    torch_loss, torch_ms, torch_lr = [], [], []
    t_start = time.perf_counter()
    for k, batch in enumerate(batches):
        lr = lr_at(k)
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr
        loss = mlm_loss(model, batch, packed)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch_ms.append((time.perf_counter() - t0) * 1e3)
        torch_loss.append(loss.item())
        torch_lr.append(lr)
    torch_wall = time.perf_counter() - t_start

    # 5. the table
    n = args.steps
    rows = [s for s in range(1, n + 1) if s == 1 or s % 10 == 0 or s == n]
    print(f"\nBERT-{cfg['model']['size']} masked LM, {args.config}, vocab {vocab_size}, {steps_per_epoch} steps per "
          f"epoch, packing {cfg['data']['packing']}; AdamW lr {o['lr']} betas {o['betas']} eps {o['eps']} "
          f"wd {o['weight_decay']} on {n_decayed} tensors ({n_excluded} excluded); schedule {cfg['schedule']['name']}, "
          f"warmup {warmup} of {total} steps; dropout 0; init seed {args.seed}; {args.threads} threads")
    print(f"{'step':>5} {'dptrain':>12} {'PyTorch':>12} {'|diff|':>10}")
    diffs = [abs(dp[i]["loss"] - torch_loss[i]) for i in range(n)]
    for s in rows:
        print(f"{s:>5} {dp[s - 1]['loss']:>12.6f} {torch_loss[s - 1]:>12.6f} {diffs[s - 1]:>10.2e}")
    first = min(20, n)
    print(f"max |diff| steps 1-{first}: {max(diffs[:first]):.3e} (at step {diffs.index(max(diffs[:first])) + 1}); "
          f"all {n} steps: {max(diffs):.3e} (at step {diffs.index(max(diffs)) + 1})")
    lr_diff = max(abs(dp[i]["lr"] - torch_lr[i]) for i in range(n))
    print(f"max |lr diff| (dptrain's metrics against this script's schedule): {lr_diff:.3e}")
    # The final weights: dptrain's run.weights_file against PyTorch's parameters after the same steps
    # (more telling than the losses for what acts slowly, e.g. which parameters are decayed).
    final, _ = read_safetensors(os.path.join(run_dir, cfg["run"]["weights_file"]))
    worst = (0.0, "", 0.0)
    for name, p in model.state_dict().items():
        if name not in final:
            raise SystemExit(f"bert_loss_curve: {name} is not in dptrain's final weights")
        d = (final[name] - p).abs().max().item()
        if d > worst[0]:
            worst = (d, name, p.abs().max().item())
    moved = max((p - init_state[k]).abs().max().item() for k, p in model.state_dict().items())
    print(f"final weights after {n} steps: max |dptrain - PyTorch| {worst[0]:.2e} in {worst[1]} (max |value| there "
          f"{worst[2]:.2f}); the largest change of any weight from its initial value: {moved:.2e}")
    skip = 3 if n > 3 else 0
    dp_model = statistics.median(r["model_ms"] for r in dp[skip:])
    dp_total = statistics.median(r["total_ms"] for r in dp[skip:])
    th = statistics.median(torch_ms[skip:])
    print(f"median step time (steps {skip + 1}-{n}): dptrain {dp_model:.1f} ms (forward+backward+optimizer; "
          f"{dp_total:.1f} ms with waiting for data), PyTorch {th:.1f} ms; ratio dptrain/PyTorch {dp_model / th:.2f} "
          f"({dp_total / th:.2f} with data)")
    shapes = [list(b["input_ids"].shape) for b in batches]
    with open(os.path.join(work, "steps.json"), "w") as f:
        json.dump([{"step": i + 1, "rows_x_length": shapes[i], "lr": torch_lr[i], "dptrain_loss": dp[i]["loss"],
                    "torch_loss": torch_loss[i], "dptrain_model_ms": dp[i]["model_ms"],
                    "dptrain_total_ms": dp[i]["total_ms"], "torch_ms": torch_ms[i]} for i in range(n)], f, indent=0)
    p10 = lambda v: sorted(v)[len(v) // 10]
    dp_p10, th_p10 = p10([r["model_ms"] for r in dp[skip:]]), p10(torch_ms[skip:])
    print(f"10th percentile (less sensitive to other load on the machine): dptrain {dp_p10:.1f} ms, PyTorch "
          f"{th_p10:.1f} ms; ratio {dp_p10 / th_p10:.2f}")
    print(f"per-step figures in {os.path.join(work, 'steps.json')}")
    print(f"wall clock: dptrain process {dp_wall:.1f} s (start-up and the end-of-run evaluation included), "
          f"PyTorch training loop {torch_wall:.1f} s")


if __name__ == "__main__":
    main()

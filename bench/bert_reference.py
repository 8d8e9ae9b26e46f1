#!/usr/bin/python3
"""PyTorch side of the BERT training-step benchmark (pairs with bert_step_bench.cpp): the same
model (Hugging Face's BertForPreTraining layout, written out in plain torch in
tests/fixtures/make_bert_fixtures.py, as Debian has no python3-transformers), sizes, ids, padding,
masked positions (gathered before the MLM head), cross-entropy, backward, AdamW,
zero_grad(set_to_none); dropout on. JSON lines on stdout.

    env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/bert_reference.py [--threads 2] [--iters 10]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
import torch

from make_bert_fixtures import BertForPreTraining

SIZES = {"tiny": (2, 128), "mini": (4, 256)}  # layers, hidden (Google's presets; heads = hidden / 64)
CASES = [("bert_tiny_b32_s128", "tiny", 32, 128), ("bert_mini_b16_s128", "mini", 16, 128)]


def inputs(batch, seq):
    """The ids, key mask and masked positions bert_step_bench.cpp makes (same generator)."""
    state = 12345
    ids, key_mask, masked, labels = [], [], [], []

    def nxt():
        nonlocal state
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return state >> 33

    for b in range(batch):
        for s in range(seq):
            i = b * seq + s
            pad = b % 2 == 1 and s >= seq * 3 // 4
            ids.append(0 if pad else 1000 + nxt() % 29522)
            key_mask.append(0 if pad else 1)
            if not pad and nxt() % 100 < 15:
                masked.append(i)
                labels.append(ids[i])
    as_t = lambda v: torch.tensor(v, dtype=torch.int64)
    return as_t(ids).view(batch, seq), as_t(key_mask).view(batch, seq), as_t(masked), as_t(labels)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for name, size, batch, seq in CASES:
        if not name.startswith(args.only):
            continue
        layers, hidden = SIZES[size]
        config = dict(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=hidden // 64, intermediate_size=4 * hidden, max_position_embeddings=512,
                      type_vocab_size=2, layer_norm_eps=1e-12, initializer_range=0.02)
        torch.manual_seed(0)
        model = BertForPreTraining(config).train()  # dropout 0.1; its pooler's [B, H] dense is noise here
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
        ids, key_mask, masked, labels = inputs(batch, seq)
        types = torch.zeros_like(ids)

        def step():
            hidden_states, _ = model.bert(ids, types, key_mask)
            picked = hidden_states.reshape(batch * seq, hidden).index_select(0, masked)
            loss = torch.nn.functional.cross_entropy(model.cls.predictions(picked), labels)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        for _ in range(args.warmup):
            step()
        ms = []
        for _ in range(args.iters):
            t0 = time.perf_counter()
            step()
            ms.append((time.perf_counter() - t0) * 1e3)
        print(json.dumps({"name": name, "median_ms": round(statistics.median(ms), 3), "min_ms": round(min(ms), 3),
                          "iters": args.iters, "threads": args.threads, "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""PyTorch side of the BERT training-step benchmark (pairs with bert_step_bench.cpp): the same
model (Hugging Face's BertForPreTraining layout, written out in plain torch in
tests/fixtures/make_bert_fixtures.py, as Debian has no python3-transformers), sizes, ids, padding,
masked positions (gathered before the MLM head), cross-entropy, backward, AdamW,
zero_grad(set_to_none); dropout on. JSON lines on stdout.

    env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/bert_reference.py [--threads 2] [--iters 10]
    python3 bench/bert_reference.py --device cuda --precision bf16 [--block 10]   (a GPU, PyTorch 2.x)

On a GPU a sample is --block steps queued back to back between two torch.cuda.synchronize()
calls (bert_step_bench's timing), forward and loss under torch.autocast with --precision bf16 or
fp16 (no loss scaling: the step time is the point); the cases marked gpu_only run there only.
Attention is the plain-torch Hugging Face layout (matmul, masked softmax, matmul), "eager" in
Hugging Face's terms, as dptrain's own. --attention sdpa (PyTorch 2.x) runs it through
torch.nn.functional.scaled_dot_product_attention instead, PyTorch's fused attention (a flash or
memory-efficient kernel, dropout inside): what a fused attention kernel would give (names end in
_sdpa).
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

import make_bert_fixtures
from make_bert_fixtures import BertForPreTraining


def sdpa_forward(self, x, mask):
    """BertSelfAttention.forward through PyTorch's fused attention; `mask` is additive (0 keeps)."""
    q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask.eq(0), dropout_p=self.dropout.p if self.training else 0.0)
    b, _, s, _ = out.shape
    return out.permute(0, 2, 1, 3).reshape(b, s, -1)

SIZES = {"tiny": (2, 128), "mini": (4, 256), "base": (12, 768), "large": (24, 1024)}  # layers, hidden (heads = hidden / 64)
# name, size, batch, sequence, gpu_only (bert_step_bench.cpp's cases)
CASES = [("bert_tiny_b32_s128", "tiny", 32, 128, False), ("bert_mini_b16_s128", "mini", 16, 128, False),
         ("bert_base_b32_s512", "base", 32, 512, True), ("bert_large_b16_s512", "large", 16, 512, True)]


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
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--block", type=int, default=10, help="GPU: steps per timed sample")
    ap.add_argument("--attention", default="eager", choices=["eager", "sdpa"],
                    help="eager: matmul, masked softmax, matmul (dptrain's layout); sdpa: PyTorch's fused attention")
    args = ap.parse_args()
    if args.attention == "sdpa":
        if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            ap.error(f"--attention sdpa needs PyTorch 2.0 or later (this is {torch.__version__})")
        make_bert_fixtures.BertSelfAttention.forward = sdpa_forward
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    if autocast_dtype is not None and not cuda:
        ap.error("--precision bf16/fp16 is for --device cuda (PyTorch 1.13's CPU autocast leaves this model's "
                 "LayerNorm with mixed dtypes)")
    for case_name, size, batch, seq, gpu_only in CASES:
        name = case_name if args.precision == "fp32" else f"{case_name}_{args.precision}"
        if args.attention == "sdpa":
            name += "_sdpa"
        if not name.startswith(args.only) or (gpu_only and not cuda):
            continue
        layers, hidden = SIZES[size]
        config = dict(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=hidden // 64, intermediate_size=4 * hidden, max_position_embeddings=512,
                      type_vocab_size=2, layer_norm_eps=1e-12, initializer_range=0.02)
        torch.manual_seed(0)
        model = BertForPreTraining(config).train().to(device)  # dropout 0.1; its pooler's [B, H] dense is noise here
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
        ids, key_mask, masked, labels = (t.to(device) for t in inputs(batch, seq))
        types = torch.zeros_like(ids)

        def step():
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                hidden_states, _ = model.bert(ids, types, key_mask)
                picked = hidden_states.reshape(batch * seq, hidden).index_select(0, masked)
                loss = torch.nn.functional.cross_entropy(model.cls.predictions(picked), labels)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        for _ in range(args.warmup):
            step()
        block = args.block if cuda else 1
        ms = []
        for _ in range(args.iters):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(block):
                step()
            if cuda:
                torch.cuda.synchronize()
            ms.append((time.perf_counter() - t0) * 1e3 / block)
        record = {"name": name, "median_ms": round(statistics.median(ms), 3), "min_ms": round(min(ms), 3),
                  "iters": args.iters, "threads": args.threads, "torch": torch.__version__}
        if cuda:
            record.update(device=torch.cuda.get_device_name(), block=block)
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()

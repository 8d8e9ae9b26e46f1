#!/usr/bin/python3
"""PyTorch side of bench/conv_bench.cpp: the same conv/pool kernels at the same shapes (float32),
timed through the aten ops a training step runs (convolution_backward with an output mask, so
the input and weight gradients are timed apart). JSON lines like conv_bench.

  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/conv_reference.py --threads 2
"""
import argparse
import json

import torch
import torch.nn.functional as F

from torch_reference import time_ms
from torch_malloc import pin_malloc_thresholds

# name, x shape, w shape, stride, pad, bias, input_grad (as in conv_bench.cpp)
CONVS = [
    ("cnn.conv1", (128, 1, 28, 28), (32, 1, 3, 3), 1, 1, True, False),
    ("cnn.conv2", (128, 32, 14, 14), (64, 32, 3, 3), 1, 1, True, True),
    ("rn.conv1", (32, 3, 32, 32), (64, 3, 7, 7), 2, 3, False, False),
    ("rn.l1", (32, 64, 8, 8), (64, 64, 3, 3), 1, 1, False, True),
    ("rn.l2s2", (32, 64, 8, 8), (128, 64, 3, 3), 2, 1, False, True),
    ("rn.l2", (32, 128, 4, 4), (128, 128, 3, 3), 1, 1, False, True),
    ("rn.l2ds", (32, 64, 8, 8), (128, 64, 1, 1), 2, 0, False, True),
    ("rn.l3s2", (32, 128, 4, 4), (256, 128, 3, 3), 2, 1, False, True),
    ("rn.l3", (32, 256, 2, 2), (256, 256, 3, 3), 1, 1, False, True),
    ("rn.l3ds", (32, 128, 4, 4), (256, 128, 1, 1), 2, 0, False, True),
    ("rn.l4s2", (32, 256, 2, 2), (512, 256, 3, 3), 2, 1, False, True),
    ("rn.l4", (32, 512, 1, 1), (512, 512, 3, 3), 1, 1, False, True),
    ("rn.l4ds", (32, 256, 2, 2), (512, 256, 1, 1), 2, 0, False, True),
]
POOLS = [
    ("cnn.pool1", (128, 32, 28, 28), 2, 2, 0),
    ("cnn.pool2", (128, 64, 14, 14), 2, 2, 0),
    ("rn.pool", (32, 64, 16, 16), 3, 2, 1),
]


def report(name, pass_, t):
    print(json.dumps({"name": name, "pass": pass_, "median_ms": round(t[0], 3), "min_ms": round(t[1], 3)}),
          flush=True)


def time_conv(name, xs, ws, s, p, has_bias, input_grad, warmup, iters):
    """Reports forward, input-gradient (when input_grad) and weight(+bias)-gradient times of a
    conv2d with input shape xs, weight shape ws, stride s and padding p. Call under no_grad."""
    x, w = torch.randn(xs), torch.randn(ws)
    b = torch.randn(ws[0]) if has_bias else None
    dy = torch.randn_like(F.conv2d(x, w, b, s, p))
    bias_sizes = [ws[0]] if has_bias else None
    bwd = lambda mask: torch.ops.aten.convolution_backward(dy, x, w, bias_sizes, [s, s], [p, p], [1, 1], False, [0, 0],
                                                           1, mask)
    report(name, "forward", time_ms(lambda: F.conv2d(x, w, b, s, p), warmup, iters))
    if input_grad:
        report(name, "backward_input", time_ms(lambda: bwd([True, False, False]), warmup, iters))
    report(name, "backward_weight", time_ms(lambda: bwd([False, True, has_bias]), warmup, iters))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pin_malloc_thresholds()  # torch_malloc.py: no page-fault churn between steps
    with torch.no_grad():
        for name, xs, ws, s, p, has_bias, input_grad in CONVS:
            if not name.startswith(args.only):
                continue
            time_conv(name, xs, ws, s, p, has_bias, input_grad, args.warmup, args.iters)
        for name, xs, k, s, p in POOLS:
            if not name.startswith(args.only):
                continue
            x = torch.randn(xs)
            y, idx = F.max_pool2d(x, k, s, p, return_indices=True)
            dy = torch.randn_like(y)
            report(name, "forward", time_ms(lambda: F.max_pool2d(x, k, s, p, return_indices=True), args.warmup,
                                           args.iters))
            report(name, "backward", time_ms(
                lambda: torch.ops.aten.max_pool2d_with_indices_backward(dy, x, [k, k], [s, s], [p, p], [1, 1], False,
                                                                        idx), args.warmup, args.iters))


if __name__ == "__main__":
    main()

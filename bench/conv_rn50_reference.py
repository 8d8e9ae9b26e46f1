#!/usr/bin/python3
"""PyTorch side of bench/conv_rn50_bench.cpp: ResNet-50 (224x224, batch 8) conv layers, float32,
timed like bench/conv_reference.py. JSON lines.

  env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/conv_rn50_reference.py --threads 2
"""
import argparse
import json

import torch
import torch.nn.functional as F

from torch_reference import time_ms

# name, C, HW, K, kernel, stride (as in conv_rn50_bench.cpp)
CONVS = [
    ("r50.conv1", 3, 224, 64, 7, 2),
    ("r50.l1.c1a", 64, 56, 64, 1, 1), ("r50.l1.c2", 64, 56, 64, 3, 1), ("r50.l1.c3", 64, 56, 256, 1, 1),
    ("r50.l1.c1b", 256, 56, 64, 1, 1), ("r50.l2.c1a", 256, 56, 128, 1, 1), ("r50.l2.c2s2", 128, 56, 128, 3, 2),
    ("r50.l2.c3", 128, 28, 512, 1, 1), ("r50.l2.ds", 256, 56, 512, 1, 2), ("r50.l2.c1b", 512, 28, 128, 1, 1),
    ("r50.l2.c2", 128, 28, 128, 3, 1), ("r50.l3.c1a", 512, 28, 256, 1, 1), ("r50.l3.c2s2", 256, 28, 256, 3, 2),
    ("r50.l3.c3", 256, 14, 1024, 1, 1), ("r50.l3.ds", 512, 28, 1024, 1, 2), ("r50.l3.c1b", 1024, 14, 256, 1, 1),
    ("r50.l3.c2", 256, 14, 256, 3, 1), ("r50.l4.c1a", 1024, 14, 512, 1, 1), ("r50.l4.c2s2", 512, 14, 512, 3, 2),
    ("r50.l4.c3", 512, 7, 2048, 1, 1), ("r50.l4.ds", 1024, 14, 2048, 1, 2), ("r50.l4.c1b", 2048, 7, 512, 1, 1),
    ("r50.l4.c2", 512, 7, 512, 3, 1),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    conv_bwd = torch.ops.aten.convolution_backward
    with torch.no_grad():
        for name, c, hw, k, kernel, s in CONVS:
            if not name.startswith(args.only):
                continue
            p = kernel // 2
            x, w = torch.randn(8, c, hw, hw), torch.randn(k, c, kernel, kernel)
            dy = torch.randn_like(F.conv2d(x, w, None, s, p))
            bwd = lambda mask: conv_bwd(dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, mask)
            for pass_, fn in [("forward", lambda: F.conv2d(x, w, None, s, p)),
                              ("backward_input", lambda: bwd([True, False, False])),
                              ("backward_weight", lambda: bwd([False, True, False]))]:
                if pass_ == "backward_input" and c == 3:
                    continue
                t = time_ms(fn, args.warmup, args.iters)
                print(json.dumps({"name": name, "pass": pass_, "median_ms": round(t[0], 3), "min_ms": round(t[1], 3)}),
                      flush=True)


if __name__ == "__main__":
    main()

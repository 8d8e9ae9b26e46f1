#!/usr/bin/python3
"""PyTorch side of bench/conv_rn50_bench.cpp: ResNet-50 (224x224, batch 8) conv layers, float32,
timed like bench/conv_reference.py. JSON lines.

  env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/conv_rn50_reference.py --threads 2
"""
import argparse

import torch
import torch.nn.functional as F

from conv_reference import time_conv
from torch_malloc import pin_malloc_thresholds

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
    pin_malloc_thresholds()  # torch_malloc.py: no page-fault churn between steps
    with torch.no_grad():
        for name, c, hw, k, kernel, s in CONVS:
            if name.startswith(args.only):
                # The stem's input needs no gradient (c == 3), as in conv_rn50_bench.cpp.
                time_conv(name, (8, c, hw, hw), (k, c, kernel, kernel), s, kernel // 2, False, c != 3, args.warmup,
                          args.iters)

if __name__ == "__main__":
    main()

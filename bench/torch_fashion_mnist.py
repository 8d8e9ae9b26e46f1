#!/usr/bin/python3
"""PyTorch reference for the default recipe (configs/fashion_mnist.yaml): SmallCNN, SGD lr 0.05
momentum 0.9, batch 128, input (x/255 - 0.2860)/0.3530, shuffled each epoch. Prints seconds per
epoch (training only, as dptrain's epoch line) and test accuracy.

  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/torch_fashion_mnist.py --epochs 1
"""
import argparse
import gzip
import time

import numpy as np
import torch
import torch.nn.functional as F

from torch_reference import SmallCNN
from torch_malloc import pin_malloc_thresholds

ROOT = "/usr/share/datasets/fashion-mnist"


def idx(name, offset):
    with gzip.open(f"{ROOT}/{name}", "rb") as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def load(split):
    x = idx(f"{split}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).astype(np.float32)
    y = idx(f"{split}-labels-idx1-ubyte.gz", 8).astype(np.int64)
    return torch.from_numpy((x / 255.0 - 0.2860) / 0.3530), torch.from_numpy(y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pin_malloc_thresholds()  # torch_malloc.py: no page-fault churn between steps
    torch.manual_seed(args.seed)
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(1, args.epochs + 1):
        model.train()
        t0 = time.perf_counter()
        perm = torch.randperm(len(xtr))
        for i in range(0, len(xtr), 128):
            idx_ = perm[i:i + 128]
            loss = F.cross_entropy(model(xtr[idx_]), ytr[idx_])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        seconds = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            acc = sum((model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
                      for i in range(0, len(xte), 1000)) / len(xte)
        print(f"epoch {epoch}: {seconds:.1f} s, test accuracy {100 * acc:.2f} %", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""torchvision + PIL image loading on one core, the reference for bench/loader_bench.cpp: what a
DataLoader worker does per image (open + decode + RandomResizedCrop + RandomHorizontalFlip +
ToTensor + Normalize, or Resize + CenterCrop + ToTensor + Normalize for eval), timed over the
first --images of a shuffled order after a warm-up pass. One JSON line per case:
  {"case": "train_224", "images": 2000, "images_per_second": ...}
  /usr/bin/python3 bench/torch_loader.py --root /tmp/photos/train [--images 2000] [--size 224] [--eval]
"""
import argparse
import json
import random
import time

import torch
from torchvision import datasets, transforms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--no-normalize", action="store_true", help="stop at the PIL image (no ToTensor/Normalize)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    normalize = [] if args.no_normalize else [
        transforms.ToTensor(), transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
    if args.eval:
        tf = [transforms.Resize(args.size * 256 // 224), transforms.CenterCrop(args.size)]
    else:
        tf = [transforms.RandomResizedCrop(args.size), transforms.RandomHorizontalFlip()]
    data = datasets.ImageFolder(args.root, transforms.Compose(tf + normalize))
    order = list(range(len(data)))
    random.Random(0).shuffle(order)
    n = min(args.images, len(order))
    for i in order[:64]:  # warm the page cache and the code paths
        data[i]
    start = time.perf_counter()
    for k in range(n):
        data[order[k % len(order)]]
    seconds = time.perf_counter() - start
    name = ("eval" if args.eval else "train") + "_%d" % args.size + ("_pil_only" if args.no_normalize else "")
    print(json.dumps({"case": name, "images": n, "images_per_second": round(n / seconds, 1)}))


if __name__ == "__main__":
    main()

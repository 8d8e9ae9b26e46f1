#!/usr/bin/python3
"""PyTorch side of the training-step benchmark: the numbers dptrain is compared against.

Times one training step (forward, cross-entropy, backward, SGD momentum 0.9) per iteration on
fixed random data: warmup, then median and min over --iters. Prints one JSON object per line,
with the same fields as bench_util.h's Timing ({"name", "median_ms", "min_ms", "iters"}).

  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/torch_reference.py --threads 2

--precision bf16 runs forward and loss under torch.autocast("cpu", torch.bfloat16) (PyTorch's
CPU autocast: oneDNN bf16 convolutions and linears) and names the cases "<case>_bf16", as
train_step_bench --precision bf16 does. --memory-format channels_last converts model and input
with torch.channels_last and suffixes "_cl", as train_step_bench --memory-format channels_last.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch_malloc import pin_malloc_thresholds


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


def resnet18():
    import torchvision  # only this case needs it
    return torchvision.models.resnet18(num_classes=10)


# name -> (model factory, input shape with batch)
def resnet50():
    import torchvision
    return torchvision.models.resnet50()  # 1000 classes, as an ImageNet recipe


TRAIN_CASES = {
    "small_cnn_b128": (SmallCNN, (128, 1, 28, 28)),
    "mlp_b256": (mlp, (256, 1, 28, 28)),
    "resnet18_b32": (resnet18, (32, 3, 32, 32)),
    "resnet50_224_b8": (resnet50, (8, 3, 224, 224)),
}


def time_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    ms = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms), min(ms)


def bench_train(name, warmup, iters, precision="fp32", memory_format="nchw"):
    factory, shape = TRAIN_CASES[name]
    torch.manual_seed(0)
    model = factory()
    model.train()
    fmt = torch.channels_last if memory_format == "channels_last" else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(shape).contiguous(memory_format=fmt)
    y = torch.randint(0, 10, (shape[0],))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    median, best = time_ms(step, warmup, iters)
    label = (name if precision == "fp32" else f"{name}_{precision}") + ("_cl" if memory_format == "channels_last" else "")
    return {"name": label, "median_ms": round(median, 3), "min_ms": round(best, 3), "iters": iters}


def bench_sgemm(n, warmup, iters):
    torch.manual_seed(0)
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)
    median, best = time_ms(lambda: torch.mm(a, b, out=c), warmup, iters)
    return {"name": f"sgemm_{n}", "median_ms": round(median, 3), "min_ms": round(best, 3), "iters": iters,
            "gflops": round(2 * n**3 / (median * 1e-3) / 1e9, 1)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per case (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations first (default 5)")
    names = list(TRAIN_CASES) + ["sgemm_2048"]
    p.add_argument("--only", choices=names, action="append", help="run just this case (repeatable)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="fp32, or bf16 CPU autocast for the training cases (default fp32)")
    p.add_argument("--memory-format", choices=["nchw", "channels_last"], default="nchw",
                   help="the training cases' model and input memory format (default nchw)")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    pin_malloc_thresholds()  # torch_malloc.py: no page-fault churn between steps
    for name in args.only or names:
        if name == "sgemm_2048":
            r = bench_sgemm(2048, args.warmup, args.iters)
        else:
            r = bench_train(name, args.warmup, args.iters, args.precision, args.memory_format)
        r.update(threads=args.threads, torch=torch.__version__)
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Image loading per core, dptrain vs torchvision + PIL on the same JPEG folder, alternating
rounds in one run (the machine is shared and noisy), as a Markdown table of images/s and ratios.

  python3 bench/compare_loader.py [--build build] [--root DIR] [--images 1000] [--rounds 3]

Without --root it writes (once) photo-like 500x375 JPEGs, ImageNet's typical size, to
/tmp/dptrain_loader_photos with build/launch/make_image_folder. One decode thread for dptrain,
one process without workers for torchvision: both are one core's work per image.
"""
import argparse
import json
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")][-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--root", help="an ImageFolder split (<root>/<class>/*.JPEG)")
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    root = args.root
    if root is None:
        base = "/tmp/dptrain_loader_photos"
        if not os.path.isdir(base):
            subprocess.run([os.path.join(args.build, "launch", "make_image_folder"), "--source", "synthetic", "--out",
                            base, "--width", "500", "--height", "375", "--classes", "20", "--train-limit", "1000",
                            "--val-limit", "20"], check=True)
        root = os.path.join(base, "train")
    torch_env = dict(os.environ)
    torch_env.pop("OPENBLAS_CORETYPE", None)
    cases = [("train 224 (RandomResizedCrop + flip)", [], []),
             ("eval 224 (Resize 256 + CenterCrop)", ["--eval"], ["--eval"])]
    rows = []
    for name, ours_extra, torch_extra in cases:
        ours, theirs, theirs_pil = [], [], []
        for _ in range(args.rounds):
            ours.append(run_json([os.path.join(args.build, "bench", "loader_bench"), "--root", root, "--images",
                                  str(args.images), "--threads", "1"] + ours_extra)["images_per_second"])
            base_cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_loader.py"), "--root", root, "--images",
                        str(args.images)] + torch_extra
            theirs.append(run_json(base_cmd, torch_env)["images_per_second"])
            theirs_pil.append(run_json(base_cmd + ["--no-normalize"], torch_env)["images_per_second"])
        o, t, p = statistics.median(ours), statistics.median(theirs), statistics.median(theirs_pil)
        rows.append((name, o, t, p))
    print("| case (1 core) | dptrain img/s | torchvision full img/s | ratio | torchvision w/o ToTensor+Normalize | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, o, t, p in rows:
        print(f"| {name} | {o:.0f} | {t:.0f} | {o / t:.2f}× | {p:.0f} | {o / p:.2f}× |")


if __name__ == "__main__":
    main()

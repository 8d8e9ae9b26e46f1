#!/usr/bin/python3
"""Weights between dptrain and torchvision, through real files, both ways.

    /usr/bin/python3 bench/torchvision_interop.py runs/x/model.safetensors [...]
        loads each weights file dptrain wrote (run.weights_file) into torchvision's model of the
        name in its metadata (num_classes from there too) with load_state_dict(strict=True), and
        prints the eval-mode logits of a fixed input;
    /usr/bin/python3 bench/torchvision_interop.py --export resnet18 10 OUT.safetensors
        writes torchvision's resnet18(num_classes=10) state_dict (seeded) for dptrain's
        model.init_from.

Needs Debian's python3-torch and python3-torchvision; reads and writes safetensors itself
(Debian has no python3-safetensors). The forward equality of the two implementations for the
same weights is pinned by tests/models/resnet_imagenet_test.cpp against
tests/fixtures/resnet50_forward.safetensors; this script checks the files and names.
"""
import json
import struct
import sys

import torch
import torchvision

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=DTYPES[e["dtype"]]) if end > begin else \
            torch.empty(0, dtype=DTYPES[e["dtype"]])
        tensors[name] = t.reshape(e["shape"])
    return tensors, metadata


def write_safetensors(path, tensors, metadata):
    names = {v: k for k, v in DTYPES.items()}
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.writelines(blobs)


def load_into_torchvision(path):
    tensors, meta = read_safetensors(path)
    name, classes = meta["model"], int(meta["num_classes"])
    model = getattr(torchvision.models, name)(num_classes=classes)
    model.load_state_dict(tensors, strict=True)  # raises listing missing/unexpected/mis-shaped keys
    model.eval()
    torch.manual_seed(0)
    with torch.no_grad():
        logits = model(torch.randn(2, 3, 64, 64))
    print(f"{path}: {len(tensors)} tensors load into torchvision.models.{name}(num_classes={classes}) strictly; "
          f"dptrain digest {meta.get('model_digest')}, logits[0,:4] {logits[0, :4].tolist()}")


def export(name, classes, out):
    torch.manual_seed(1)
    model = getattr(torchvision.models, name)(num_classes=classes)
    write_safetensors(out, model.state_dict(), {"model": name, "num_classes": str(classes),
                                                 "torchvision_version": torchvision.__version__})
    print(f"{out}: torchvision.models.{name}(num_classes={classes}), {len(model.state_dict())} tensors")


def main():
    torch.set_num_threads(2)
    if len(sys.argv) == 5 and sys.argv[1] == "--export":
        export(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) >= 2 and not sys.argv[1].startswith("-"):
        for path in sys.argv[1:]:
            load_into_torchvision(path)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

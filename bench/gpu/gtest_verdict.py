#!/usr/bin/env python3
"""Reads a GoogleTest XML report and says whether the run proves anything on the GPU machine.

A failure fails. A skip fails unless expected_skips.txt lists it (program, test pattern, and a
phrase its skip message must contain): tests skip by design only for reasons that hold on a one-GPU
machine too (NCCL tests that need two ranks, ...). A skip whose message says no GPU was seen is
never expected. Prints one summary line (and the offending tests), exits:
  0  no failure, no unexpected skip;
  1  failures or unexpected skips (or no report: the program crashed or hung);
  3  no failure, but GPU tests skipped because no GPU was visible (the GPU-less machine).

  gtest_verdict.py REPORT.xml --program runtime_tests --expected-skips bench/gpu/expected_skips.txt
"""
import argparse
import fnmatch
import os
import re
import sys
import xml.etree.ElementTree as ET

# Skip messages that mean the GPU was not seen (tests/**: "no CUDA GPU is visible ...", the NCCL
# main's "the GPU tests skip", the CUDA runtime failing).
NO_GPU = re.compile(r"no CUDA GPU is visible|the GPU tests skip|has no GPU of its own|the CUDA runtime failed|"
                    r"GPU\(s\): NCCL needs")
# Names of tests that need a GPU, for the count of GPU tests that ran.
GPU_NAME = re.compile(r"Cuda|CUDA|Gpu|GPU|Nccl|NCCL")


def load_expected(path, program):
    rules = []
    if not path or not os.path.exists(path):
        return rules
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].rstrip()
            if not line.strip():
                continue
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[0] == program:
                rules.append((parts[1], parts[2].strip()))
    return rules


def main():
    p = argparse.ArgumentParser()
    p.add_argument("report")
    p.add_argument("--program", required=True)
    p.add_argument("--expected-skips", default="")
    p.add_argument("--list-limit", type=int, default=25)
    args = p.parse_args()
    name = args.program
    if not os.path.exists(args.report) or os.path.getsize(args.report) == 0:
        print(f"{name}: no XML report (the program crashed, hung or never started): see its log")
        return 1
    try:
        root = ET.parse(args.report).getroot()
    except ET.ParseError as e:
        print(f"{name}: unreadable XML report ({e})")
        return 1
    rules = load_expected(args.expected_skips, name)
    passed, failed, expected, unexpected, no_gpu, gpu_ran, not_run = [], [], [], [], [], [], []
    for case in root.iter("testcase"):
        full = f"{case.get('classname')}.{case.get('name')}"
        if case.get("status") == "notrun":  # DISABLED_ tests
            not_run.append(full)
            continue
        failures = case.findall("failure") + case.findall("error")
        skipped = case.find("skipped")
        if failures:
            msg = (failures[0].get("message") or "").strip().splitlines()
            failed.append((full, msg[0] if msg else ""))
        elif skipped is not None or case.get("result") == "skipped":
            msg = ((skipped.get("message") if skipped is not None else "") or "").strip()
            msg = msg.replace("\n", " ")
            if NO_GPU.search(msg):
                no_gpu.append((full, msg))
            elif any(fnmatch.fnmatchcase(full, pat) and phrase in msg for pat, phrase in rules):
                expected.append((full, msg))
            else:
                unexpected.append((full, msg))
        else:
            passed.append(full)
            if GPU_NAME.search(full):
                gpu_ran.append(full)
    total = len(passed) + len(failed) + len(expected) + len(unexpected) + len(no_gpu)
    print(f"{name}: {total} tests: {len(passed)} passed ({len(gpu_ran)} of them GPU tests by name), "
          f"{len(failed)} failed, {len(expected)} skipped by design, {len(no_gpu)} skipped for want of a GPU, "
          f"{len(unexpected)} skipped unexpectedly")

    def show(title, items):
        if not items:
            return
        print(f"  {title}:")
        for full, msg in items[: args.list_limit]:
            print(f"    {full}" + (f"  -- {msg[:160]}" if msg else ""))
        if len(items) > args.list_limit:
            print(f"    ... and {len(items) - args.list_limit} more")

    show("FAILED", failed)
    show("skipped unexpectedly (not in expected_skips.txt)", unexpected)
    show("skipped by design (expected_skips.txt)", expected)
    if no_gpu:
        show("skipped: no GPU", no_gpu[:5])
    if failed or unexpected:
        return 1
    return 3 if no_gpu else 0


if __name__ == "__main__":
    sys.exit(main())

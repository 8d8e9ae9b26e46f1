#!/usr/bin/env python3
"""Makes a copy of a carried program that starts without the carried loader on the command line.

Rewrites, in place and without growing anything (as `patchelf` would, which the GPU machine
lacks), the program's interpreter (PT_INTERP) to INTERP and its DT_RUNPATH string to RPATH, and
turns DT_RUNPATH into DT_RPATH, which the loader applies to every library the program loads, not
only to its direct dependencies. Both new paths must be no longer than the old ones (the
interpreter's is 27 characters; the RUNPATH CMake writes is longer than 16).

Used by `run_on_device.sh prove` when a tool must start the program itself (compute-sanitizer) and
starting the carried loader as the tool's target does not work: the copy runs on the carried
glibc without LD_LIBRARY_PATH, which would also reach the tool and load our glibc under its loader.

  elf_relocate.py IN OUT --interp /tmp/dptrain-ld.so --rpath /tmp/dptrain-lib
"""
import argparse
import os
import struct
import sys

PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_STRTAB, DT_RPATH, DT_RUNPATH = 0, 5, 15, 29


def relocate(data, interp, rpath):
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian 64-bit ELF file")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    phdrs = []
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _align = struct.unpack_from(
            "<IIQQQQQQ", data, phoff + i * phentsize)
        phdrs.append((p_type, p_offset, p_vaddr, p_filesz))

    def file_offset(vaddr):
        for p_type, p_offset, p_vaddr, p_filesz in phdrs:
            if p_type == PT_LOAD and p_vaddr <= vaddr < p_vaddr + p_filesz:
                return p_offset + (vaddr - p_vaddr)
        raise ValueError(f"address {vaddr:#x} is in no loaded segment")

    def overwrite(offset, room, text):
        raw = text.encode() + b"\0"
        if len(raw) > room:
            raise ValueError(f"{text!r} does not fit in {room - 1} characters")
        data[offset:offset + room] = raw + b"\0" * (room - len(raw))

    interp_done = rpath_done = False
    for p_type, p_offset, _vaddr, p_filesz in phdrs:
        if p_type == PT_INTERP:
            overwrite(p_offset, p_filesz, interp)
            interp_done = True
        if p_type == PT_DYNAMIC:
            entries = []
            for off in range(p_offset, p_offset + p_filesz, 16):
                tag, val = struct.unpack_from("<qQ", data, off)
                entries.append((off, tag, val))
                if tag == DT_NULL:
                    break
            strtab = [val for _, tag, val in entries if tag == DT_STRTAB]
            paths = [(off, tag, val) for off, tag, val in entries if tag in (DT_RPATH, DT_RUNPATH)]
            if not strtab or not paths:
                raise ValueError("no DT_STRTAB or no DT_RUNPATH/DT_RPATH to rewrite")
            base = file_offset(strtab[0])
            for off, tag, val in paths:
                start = base + val
                end = data.index(b"\0", start)
                overwrite(start, end - start + 1, rpath)
                struct.pack_into("<q", data, off, DT_RPATH)
            rpath_done = True
    if not interp_done or not rpath_done:
        raise ValueError("no PT_INTERP or no PT_DYNAMIC segment")
    return data


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--interp", required=True)
    p.add_argument("--rpath", required=True)
    args = p.parse_args()
    with open(args.input, "rb") as f:
        data = bytearray(f.read())
    try:
        relocate(data, args.interp, args.rpath)
    except ValueError as e:
        print(f"elf_relocate.py: {args.input}: {e}", file=sys.stderr)
        return 1
    with open(args.output, "wb") as f:
        f.write(data)
    os.chmod(args.output, 0o755)
    return 0


if __name__ == "__main__":
    sys.exit(main())

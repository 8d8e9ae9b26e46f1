"""Fixed glibc malloc thresholds for the PyTorch side of the benchmarks.

PyTorch 1.13's CPU allocator is plain malloc/free. With glibc's default (dynamic) thresholds the
heap is trimmed whenever its free top passes the trim threshold, so activation memory freed at
the end of a step goes back to the kernel and is faulted in (and zeroed) again in the next: on
this machine ~7,700 page faults per SmallCNN b128 step of torch_reference.py (perf stat), ~15 ms
of a ~55 ms step. How much a process pays depends on its heap's history: the same model inside
bench/torch_fashion_mnist.py's epoch loop pays far less, which is why PyTorch's step benchmark
used to be ~40 % slower than its own epoch (bench/RESULTS.md, "Step benchmark vs epoch").
Pinning the thresholds (no trimming, the mmap threshold at glibc's maximum) removes the churn:
the step benchmark then measures what an epoch does. dptrain needs none of this (its caching
allocator keeps blocks), so this only takes away a handicap of the reference.
"""
import ctypes

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit; larger is refused


def pin_malloc_thresholds():
    libc = ctypes.CDLL("libc.so.6")
    ok = libc.mallopt(M_TRIM_THRESHOLD, ctypes.c_int(2**31 - 1)) and libc.mallopt(M_MMAP_THRESHOLD,
                                                                                 ctypes.c_int(MMAP_THRESHOLD_MAX))
    if not ok:
        raise RuntimeError("mallopt refused the thresholds")

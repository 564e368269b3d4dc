"""Two GPUs: a process that uses only GPU 1 creates no context on GPU 0 (the device guard restores the caller's
device without touching another), and caches on both GPUs from one thread keep their own devices.

Run by scripts/gpu-check.sh where nvidia-smi lists two GPUs or more; elsewhere (fewer than two CUDA devices for
torch, or no CUDA caches) it prints "SKIPPED: <why>" and exits 0. The contexts are read from
`nvidia-smi --query-compute-apps` while this process is alive. Exit status: 0 when every check passed.
"""
from __future__ import annotations

import os
import subprocess
import sys

try:
    import torch
except ImportError as e:
    print(f"SKIPPED: torch is not importable ({e})")
    sys.exit(0)

if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print(f"SKIPPED: torch sees {n} CUDA device(s); the context check needs two")
    sys.exit(0)

import kvcache  # noqa: E402


def gpus_with_our_context():
    """Indices of the GPUs on which this process holds a context (nvidia-smi's compute apps, by bus id)."""
    bus = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout
    index_of = {b.strip(): int(i) for i, b in (line.split(",") for line in bus.strip().splitlines())}
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_bus_id", "--format=csv,noheader"],
                          capture_output=True, text=True, check=True).stdout
    return sorted({index_of[b.strip()] for p, b in (line.split(",") for line in apps.strip().splitlines())
                   if int(p) == os.getpid()})


def main() -> int:
    failed = 0
    torch.cuda.set_device(1)  # torch creates its context on GPU 1 only
    try:
        cache = kvcache.OffloadedCache(num_hidden_layers=2, device="cuda:1")
    except kvcache.KvcacheError as e:
        print(f"SKIPPED: kvcache cannot make CUDA caches ({e}); set KVC_BACKEND_PATH to the directory of "
              f"libkvcache-cuda.so")
        return 0
    x = torch.randn(1, 2, 256, 64, device="cuda:1")
    for layer in range(2):
        cache.update(x, x, layer)
    cache.update(x[:, :, :1], x[:, :, :1], 0)
    torch.cuda.synchronize(1)
    on = gpus_with_our_context()
    if not on:  # our own context on GPU 1 is not listed either: nvidia-smi cannot see this pid (a container)
        print(f"SKIPPED: nvidia-smi lists no context of pid {os.getpid()} (another pid namespace?); the context "
              f"count cannot be read here")
    else:
        ok = on == [1]
        print(f"{'PASS' if ok else 'FAIL'}: caches on GPU 1 only: this process holds contexts on GPUs {on} "
              f"(expected [1])")
        failed += not ok
    ok = torch.cuda.current_device() == 1
    print(f"{'PASS' if ok else 'FAIL'}: the current device after kvcache calls is {torch.cuda.current_device()} (1)")
    failed += not ok
    # Now a cache on GPU 0 from the same thread (current device 1): each cache keeps its own device.
    other = kvcache.DynamicCache(num_hidden_layers=1, device="cuda:0")
    y = torch.randn(1, 2, 8, 64, device="cuda:0")
    keys, _ = other.update(y, y, 0)
    ok = torch.equal(torch.from_dlpack(keys).cpu(), y.cpu()) and torch.cuda.current_device() == 1
    print(f"{'PASS' if ok else 'FAIL'}: a cache on GPU 0 from a thread on GPU 1 writes GPU 0 and leaves device 1 current")
    failed += not ok
    other.close()
    cache.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

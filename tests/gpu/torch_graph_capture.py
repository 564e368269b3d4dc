"""CUDA graph capture through torch of an offloaded cache's update and of a pool's step write and block table.

Run by scripts/gpu-check.sh on a machine with an NVIDIA GPU (the Python package built, KVC_BACKEND_PATH naming the
directory of libkvcache-cuda.so). Where torch has no CUDA device, or kvcache cannot make CUDA caches, it prints
"SKIPPED: <why>" and exits 0.

A captured graph replays the launches and copies it recorded, with the addresses they had: the cache's host
counters do not move (docs/gpus.md). So each check captures one step with static input tensors, changes the
inputs in place, replays, and compares the slots the captured step wrote with the new inputs; the memory a replay
reads must still be alive (compute-sanitizer runs this script too). A kvcache error that refuses the capture by
name is an accepted outcome (printed as REFUSED); a capture that the runtime invalidates, a crash, or a replay
that writes anything but the inputs fails. Exit status: 0 when every check passed or was refused, 1 otherwise.
"""
from __future__ import annotations

import sys
import traceback

try:
    import torch
except ImportError as e:  # the machine's own torch is expected; without it there is nothing to capture
    print(f"SKIPPED: torch is not importable ({e})")
    sys.exit(0)

if not torch.cuda.is_available():
    print(f"SKIPPED: torch {torch.__version__} sees no CUDA device")
    sys.exit(0)

import kvcache  # noqa: E402

DEV = "cuda:0"


def plugin_problem():
    try:
        kvcache.DynamicCache(device=DEV).close()
    except kvcache.KvcacheError as e:
        return str(e)
    return None


def host(view):
    """A view's contents as a CPU tensor (a copy), for device and pinned host (offloaded) views alike."""
    try:
        return torch.from_dlpack(view).to("cpu", copy=True)
    except (RuntimeError, TypeError, BufferError):
        import numpy as np
        return torch.from_numpy(np.from_dlpack(view).copy())


def refused(e: Exception) -> bool:
    """A kvcache error that names the capture: the library declined rather than record a wrong graph."""
    return isinstance(e, kvcache.KvcacheError) and "captur" in str(e).lower()


def capture(stream, fn):
    """Captures fn() on `stream` (the stream the cache or pool is bound to) into a graph; returns the graph."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        fn()
    return graph


def check_offloaded_update():
    """An OffloadedCache of 2 layers on a bound stream; layer 0 is offloaded while layer 1 is updated, so the
    captured update of layer 0 prefetches it, writes the new token and offloads it again."""
    stream = torch.cuda.Stream()
    cache = kvcache.OffloadedCache(num_hidden_layers=2, device=DEV)
    cache.stream = stream
    gen = torch.Generator(device=DEV).manual_seed(7)
    with torch.cuda.stream(stream):
        for layer in range(2):
            x = torch.randn(1, 2, 64, 32, generator=gen, device=DEV)
            cache.update(x, x, layer)
        k = torch.randn(1, 2, 1, 32, generator=gen, device=DEV)
        v = torch.randn(1, 2, 1, 32, generator=gen, device=DEV)
        cache.update(k, v, 0)  # eager warm-up of the step that is captured (allocations happen here, not in capture)
        cache.update(k, v, 1)
    stream.synchronize()
    graph = capture(stream, lambda: (cache.update(k, v, 0), cache.update(k, v, 1)))
    new_k, new_v = torch.randn_like(k) * 3, torch.randn_like(v) * 3
    with torch.cuda.stream(stream):
        k.copy_(new_k)
        v.copy_(new_v)
        graph.replay()
    stream.synchronize()
    view = cache.layer_view(0)
    got_k, got_v = host(view.keys), host(view.values)
    # The captured step wrote the token slot it had at capture time: the newest one then (index 65 of 66 + 1).
    slot = got_k.shape[2] - 1
    ok = torch.equal(got_k[:, :, slot], new_k[:, :, 0].cpu()) and torch.equal(got_v[:, :, slot], new_v[:, :, 0].cpu())
    cache.close()
    return ok, f"replayed update wrote slot {slot} of layer 0: {'the new inputs' if ok else 'something else'}"


def check_pool_write_and_table():
    """A pool's step write (copy_rows_batch, one launch) and its padded block table, captured and replayed."""
    stream = torch.cuda.Stream()
    pool = kvcache.Pool(dtype=torch.float32, groups=[kvcache.PoolGroup("full", block_size=16, num_blocks=64)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=2, head_dim=32)] * 2, device=DEV)
    pool.stream = stream
    seq = pool.sequence()
    slots = seq.reserve(list(range(40)))
    gen = torch.Generator(device=DEV).manual_seed(11)
    keys = [torch.randn(40, 2, 32, generator=gen, device=DEV) for _ in range(2)]
    values = [torch.randn(40, 2, 32, generator=gen, device=DEV) for _ in range(2)]
    with torch.cuda.stream(stream):
        pool.write(keys, values, slots)
        eager_table = host(pool.block_table([seq]))
    stream.synchronize()
    tables = []
    graph = capture(stream, lambda: (pool.write(keys, values, slots), tables.append(pool.block_table([seq]))))
    for t in keys + values:
        t.mul_(-2)
    with torch.cuda.stream(stream):
        graph.replay()
    stream.synchronize()
    ok = torch.equal(host(tables[0]), eager_table)
    flat = slots.group(0)
    storage = pool.layer_storage(0)
    got = host(storage.keys).reshape(-1, 2, 32)
    ok = ok and all(torch.equal(got[s], keys[0][i].cpu()) for i, s in enumerate(flat))
    pool.close()
    return ok, f"replayed write and table: {'equal to the new inputs and the eager table' if ok else 'different'}"


def main() -> int:
    problem = plugin_problem()
    if problem is not None:
        print(f"SKIPPED: torch sees a CUDA device but kvcache cannot make CUDA caches ({problem}); set "
              f"KVC_BACKEND_PATH to the directory of libkvcache-cuda.so")
        return 0
    failed = 0
    for name, check in (("offloaded update", check_offloaded_update), ("pool write + block table", check_pool_write_and_table)):
        try:
            ok, what = check()
            print(f"{'PASS' if ok else 'FAIL'}: graph capture of the {name}: {what}")
            failed += not ok
        except Exception as e:  # noqa: BLE001 - every failure is reported, the next check still runs
            if refused(e):
                print(f"REFUSED: graph capture of the {name}: {e}")
            else:
                print(f"FAIL: graph capture of the {name}: {type(e).__name__}: {e}")
                traceback.print_exc()
                failed += 1
        torch.cuda.synchronize()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

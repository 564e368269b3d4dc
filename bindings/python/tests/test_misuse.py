"""Misuse sweep through the public Python API, as a careless or hostile caller would write it: views read after
the call that invalidated them, objects used after close, closed twice, context managers left twice, DLPack
capsules consumed twice, wrong dtypes, ranks and shapes, non-contiguous inputs, huge and negative counts, None and
wrong types, paths with NUL bytes. Every case gets a specific exception whose message names the argument, never a
crash, and the object still works afterwards, unchanged."""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import kvcache
from conftest import assert_unchanged, snapshot
from test_views import _CapsuleHolder

torch = pytest.importorskip("torch", reason="SKIPPED: the misuse sweep exports views through torch (scripts/setup.sh)")


def f32(*shape, start=0.0):
    return (np.arange(int(np.prod(shape)), dtype=np.float32) + start).reshape(shape)


def filled():
    """A dynamic cache of 2 layers holding 3 tokens of batch 2."""
    cache = kvcache.DynamicCache(num_hidden_layers=2)
    for layer in range(2):
        cache.update(f32(2, 2, 3, 4), f32(2, 2, 3, 4, start=500), layer)
    return cache


def refused(obj, call, exc, *fragments, state=None):
    """Runs call(), wants exc with every fragment in its message, and checks that state(obj) did not change."""
    state = state or snapshot
    before = state(obj)
    with pytest.raises(exc) as info:
        call()
    for fragment in fragments:
        assert fragment in str(info.value), f"{str(info.value)!r} does not name {fragment!r}"
    after = state(obj)
    if state is snapshot:
        assert_unchanged(before, obj)
    else:
        assert before == after
    return info.value


def still_works(cache):
    """The cache accepts an update of one token and reports it."""
    n = cache.get_seq_length(0)
    batch = cache.layer_info(0).batch_size if cache.layer_info(0).is_initialized else 2
    keys, _ = cache.update(f32(batch, 2, 1, 4, start=9000), f32(batch, 2, 1, 4), 0)
    assert cache.get_seq_length(0) == n + 1
    assert np.from_dlpack(keys)[0, 0, -1, 0] == 9000.0


# ------------------------------------------------------------------------------------- views after mutation

MUTATIONS = {
    "update": lambda c: c.update(f32(2, 2, 1, 4), f32(2, 2, 1, 4), 0),
    "update_all": lambda c: c.update_all([f32(2, 2, 1, 4)] * 2, [f32(2, 2, 1, 4)] * 2),
    "failed update": lambda c: pytest.raises(ValueError, c.update, f32(2, 9, 1, 4), f32(2, 9, 1, 4), 0),
    "crop": lambda c: c.crop(1),
    "reorder_cache": lambda c: c.reorder_cache([1, 0]),
    "batch_repeat_interleave": lambda c: c.batch_repeat_interleave(2),
    "batch_select_indices": lambda c: c.batch_select_indices([1]),
    "reserve": lambda c: c.reserve(4096),
    "reset": lambda c: c.reset(),
    "restore": lambda c: c.restore(_saved(c)),
    "close": lambda c: c.close(),
}


def _saved(cache):
    path = os.path.join(_saved.dir, "c.kvc")
    cache.save(path)
    return path


@pytest.fixture(autouse=True)
def _tmpdir(tmp_path):
    _saved.dir = str(tmp_path)


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_view_is_refused_after_every_mutating_call(mutation):
    cache = filled()
    keys, values = cache.layer_view(0)
    kept = np.array(np.from_dlpack(keys), copy=True)
    MUTATIONS[mutation](cache)
    for view in (keys, values):
        assert not view.is_valid
        with pytest.raises(kvcache.StaleViewError):
            view.__dlpack__()
        with pytest.raises(kvcache.StaleViewError):
            np.from_dlpack(view)
        with pytest.raises(kvcache.StaleViewError):
            np.asarray(view)
        with pytest.raises(kvcache.StaleViewError):
            torch.from_dlpack(view)
        # metadata is a copy the view owns: reading it touches no cache memory
        assert view.shape == (2, 2, 3, 4) and view.dtype == "float32"
        assert "stale" in repr(view) or mutation == "close"
    if mutation == "close":
        with pytest.raises(ValueError, match="closed"):  # the closed cache is named before its input
            cache.update(f32(2, 2, 1, 4), f32(2, 2, 1, 4), 0)
        with pytest.raises(kvcache.StaleViewError, match="closed cache"):
            kvcache.DynamicCache().update(keys, values, 0)
        return
    other = kvcache.DynamicCache()
    with pytest.raises(kvcache.StaleViewError):  # a stale view is refused as an input, by any cache
        other.update(keys, values, 0)
    assert len(other) == 0
    before = snapshot(cache)
    with pytest.raises(kvcache.StaleViewError):
        cache.update(keys, values, 0)
    assert_unchanged(before, cache)
    still_works(cache)
    fresh = cache.layer_view(0).keys
    assert fresh.is_valid and fresh.shape[2] >= 1
    assert kept[0, 0, 0, 0] == 0.0  # the copy taken before is untouched by anything


def test_views_of_a_dropped_cache_stay_readable():
    """A view keeps its cache's memory alive: dropping the cache object is not closing it."""
    cache = filled()
    keys, _ = cache.layer_view(1)
    del cache
    gc.collect()
    assert keys.is_valid
    assert np.array_equal(np.from_dlpack(keys), f32(2, 2, 3, 4))


def test_capsules_consumed_twice_and_after_close():
    cache = filled()
    keys, _ = cache.layer_view(0)
    cap = keys.__dlpack__()
    t = torch.utils.dlpack.from_dlpack(cap)
    with pytest.raises(RuntimeError, match="consumed only once|invalid capsule"):
        torch.utils.dlpack.from_dlpack(cap)
    versioned = keys.__dlpack__(max_version=(1, 1))
    a = np.from_dlpack(_CapsuleHolder(versioned))
    with pytest.raises((RuntimeError, ValueError, TypeError, BufferError)):
        np.from_dlpack(_CapsuleHolder(versioned))
    # a capsule made while the view was valid, consumed after close: the capsule owns the cache's memory
    late = keys.__dlpack__()
    cache.close()
    after = torch.utils.dlpack.from_dlpack(late)
    for x in (t, torch.from_numpy(a), after):
        assert torch.equal(x, torch.from_numpy(f32(2, 2, 3, 4)))
    # an unconsumed capsule of a closed cache is freed without touching it
    del late, versioned
    gc.collect()


# --------------------------------------------------------------------------------- close and context managers

CALLS_AFTER_CLOSE = {
    "update": lambda c: c.update(f32(2, 2, 1, 4), f32(2, 2, 1, 4), 0),
    "update_all": lambda c: c.update_all([f32(2, 2, 1, 4)] * 2, [f32(2, 2, 1, 4)] * 2),
    "len": len,
    "layer_view": lambda c: c.layer_view(0),
    "layer_info": lambda c: c.layer_info(0),
    "get_seq_length": lambda c: c.get_seq_length(0),
    "get_mask_sizes": lambda c: c.get_mask_sizes(1, 0),
    "memory": lambda c: c.memory(),
    "crop": lambda c: c.crop(1),
    "reorder_cache": lambda c: c.reorder_cache([0, 1]),
    "batch_split": lambda c: c.batch_split(2, 1),
    "reserve": lambda c: c.reserve(8),
    "reset": lambda c: c.reset(),
    "clone": lambda c: c.clone(),
    "save": lambda c: c.save(os.path.join(_saved.dir, "x.kvc")),
    "restore": lambda c: c.restore(os.path.join(_saved.dir, "x.kvc")),
    "stream": lambda c: c.stream,
    "iter": lambda c: list(c),
}


@pytest.mark.parametrize("call", list(CALLS_AFTER_CLOSE))
def test_every_call_on_a_closed_cache_raises(call):
    cache = filled()
    cache.close()
    with pytest.raises(ValueError, match="closed"):
        CALLS_AFTER_CLOSE[call](cache)
    assert cache.closed and repr(cache).endswith("(closed)")


def test_close_twice_and_context_managers():
    cache = filled()
    cache.close()
    cache.close()  # harmless
    with kvcache.DynamicCache() as c:
        c.update(f32(1, 1, 1, 2), f32(1, 1, 1, 2), 0)
    c.__exit__(None, None, None)  # a second exit is a no-op
    assert c.closed
    with pytest.raises(ValueError, match="cache is closed"):
        with c:
            pass
    ed = kvcache.EncoderDecoderCache(kvcache.DynamicCache(), kvcache.DynamicCache())
    with ed:
        pass
    ed.close()
    with pytest.raises(ValueError, match="cache is closed"):
        ed.__enter__()
    with pytest.raises(ValueError, match="closed"):
        ed.update(f32(1, 1, 1, 2), f32(1, 1, 1, 2), 0)


# ------------------------------------------------------------------------------------ dtypes, ranks and shapes

@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32, np.uint8, np.bool_, np.complex64])
@pytest.mark.parametrize("which", ["key", "value"])
def test_wrong_dtypes_are_refused(dtype, which):
    cache = filled()
    good, bad = f32(2, 2, 1, 4), f32(2, 2, 1, 4).astype(dtype)
    k, v = (bad, good) if which == "key" else (good, bad)
    e = refused(cache, lambda: cache.update(k, v, 0), kvcache.DtypeMismatchError, f"{which}.dtype")
    assert isinstance(e, TypeError)
    still_works(cache)


def test_a_dtype_other_than_the_stored_one_is_refused():
    cache = filled()
    half = f32(2, 2, 1, 4).astype(np.float16)
    refused(cache, lambda: cache.update(half, half, 0), kvcache.DtypeMismatchError, "dtype")
    refused(cache, lambda: cache.update(f32(2, 2, 1, 4), half, 1), kvcache.DtypeMismatchError, "dtype")


@pytest.mark.parametrize("shape, fragment", [
    ((), "key.ndim is 0"), ((4,), "key.ndim is 1"), ((2, 1, 4), "key.ndim is 3"), ((1, 2, 2, 1, 4), "key.ndim is 5"),
    ((2, 3, 1, 4), "num_kv_heads"), ((2, 2, 1, 5), "head_dim"), ((2, 2, 1, 0), "head_dim"), ((0, 2, 1, 4), "batch"),
    ((1, 2, 1, 4), "batch"),
])
def test_wrong_ranks_and_shapes_are_refused(shape, fragment):
    cache = filled()
    x = np.zeros(shape, np.float32)
    refused(cache, lambda: cache.update(x, x, 0), kvcache.ShapeMismatchError, fragment)
    still_works(cache)


def test_key_and_value_that_disagree_are_refused():
    cache = filled()
    refused(cache, lambda: cache.update(f32(2, 2, 1, 4), f32(2, 2, 2, 4), 0), kvcache.KvcacheError)
    refused(cache, lambda: cache.update_all([f32(2, 2, 1, 4)], [f32(2, 2, 1, 4)] * 2), kvcache.KvcacheError)
    refused(cache, lambda: cache.update_all([f32(2, 2, 1, 4)] * 3, [f32(2, 2, 1, 4)] * 3), kvcache.KvcacheError)


def test_strided_negative_strided_and_empty_inputs_are_read_correctly():
    cache = kvcache.DynamicCache()
    base = f32(2, 2, 6, 4)
    for x in (base[:, :, ::2], base[:, :, ::-1], base[:, ::-1, 1:4], np.asfortranarray(base[:, :, :3])):
        keys, values = cache.update(x, x[..., ::-1], 0)
        got = np.from_dlpack(keys)[:, :, -x.shape[2]:]
        assert np.array_equal(got, x)
        assert np.array_equal(np.from_dlpack(values)[:, :, -x.shape[2]:], x[..., ::-1])
    n = cache.get_seq_length()
    before = snapshot(cache)
    empty = np.zeros((2, 2, 0, 4), np.float32)
    cache.update(empty, empty, 0)  # zero tokens: nothing happens
    assert_unchanged(before, cache)
    assert cache.get_seq_length() == n
    t = torch.from_numpy(base).transpose(2, 3)  # a torch view with permuted strides
    assert cache.update(t[:, :, :, :1].transpose(2, 3).contiguous(), t[:, :, :, :1].transpose(2, 3), 0)


@pytest.mark.parametrize("bad", [None, "keys", 3, [[1.0]], object()])
def test_inputs_that_are_not_tensors(bad):
    cache = filled()
    refused(cache, lambda: cache.update(bad, f32(2, 2, 1, 4), 0), TypeError, "key")
    refused(cache, lambda: cache.update(f32(2, 2, 1, 4), bad, 0), TypeError, "value")
    refused(cache, lambda: cache.update_all([bad] * 2, [f32(2, 2, 1, 4)] * 2), TypeError, "key")


# ------------------------------------------------------------------------------------- huge and negative counts

HUGE = [2**62, 2**63 - 1, 2**63, 2**64, 2**100, -1, -(2**63) - 1]


@pytest.mark.parametrize("n", HUGE)
def test_layer_indices_out_of_range(n):
    cache = filled()
    refused(cache, lambda: cache.update(f32(2, 2, 1, 4), f32(2, 2, 1, 4), n), IndexError, "layer_idx")
    refused(cache, lambda: cache.layer_view(n), IndexError, "layer_idx")
    refused(cache, lambda: cache.get_seq_length(n), IndexError, "layer_idx")


@pytest.mark.parametrize("n", HUGE)
@pytest.mark.parametrize("call, name", [
    (lambda c, n: c.reserve(n), "tokens"),
    (lambda c, n: c.batch_repeat_interleave(n), "repeats"),
    (lambda c, n: c.get_mask_sizes(n, 0), "query_length"),
    (lambda c, n: c.batch_split(n, 1), "full_batch_size"),
    (lambda c, n: c.batch_split(2, n), "split_size"),
])
def test_counts_beyond_every_range(call, name, n):
    cache = filled()
    if name == "split_size" and 0 < n < 2**63:
        (whole,) = call(cache, n)  # a split past the batch is legal: one cache of every row
        assert whole.layer_info(0).batch_size == 2 and cache.layer_info(0).batch_size == 2
        return
    e = refused(cache, lambda: call(cache, n), (kvcache.KvcacheError, OverflowError), name)
    if isinstance(e, OverflowError):
        assert str(n) in str(e) and "2^" in str(e)  # names the value and the range
    still_works(cache)


@pytest.mark.parametrize("n", [2**63, 2**64, -(2**63) - 1])
def test_crop_beyond_int64(n):
    cache = filled()
    refused(cache, lambda: cache.crop(n), OverflowError, "tokens", str(n))
    cache.crop(2**62)  # transformers' semantics: a length past the end keeps everything ...
    assert cache.get_seq_length() == 3
    cache.crop(-(2**62))  # ... and a negative one drops that many from the end, here all
    assert cache.get_seq_length() == 0
    still_works(cache)


@pytest.mark.parametrize("bad", [None, 1.5, "2", [2]])
def test_counts_of_the_wrong_type(bad):
    cache = filled()
    for call in (cache.reserve, cache.crop, cache.batch_repeat_interleave, lambda n: cache.get_mask_sizes(n, 0),
                 lambda n: cache.update(f32(2, 2, 1, 4), f32(2, 2, 1, 4), n)):
        refused(cache, lambda: call(bad), TypeError)
    still_works(cache)


@pytest.mark.parametrize("indices, exc, fragment", [
    ([2], IndexError, "beam_idx[0]"), ([-1, 0], IndexError, "beam_idx[0]"), ([2**62, 0], IndexError, "beam_idx[0]"),
    ([0, 2**63], OverflowError, "beam_idx[1]"), ([], kvcache.InvalidArgumentError, "beam_idx"),
    ([0, None], TypeError, "beam_idx[1]"), ([0.5], TypeError, "beam_idx[0]"), (None, TypeError, "beam_idx"),
    (np.zeros((2, 1), np.int64), ValueError, "beam_idx"), (np.zeros(2, np.float32), TypeError, "beam_idx"),
])
def test_index_lists(indices, exc, fragment):
    cache = filled()
    refused(cache, lambda: cache.reorder_cache(indices), exc, fragment)
    refused(cache, lambda: cache.batch_select_indices(indices), exc, fragment.replace("beam_idx", "indices"))
    still_works(cache)


@pytest.mark.parametrize("kwargs, exc, fragment", [
    ({"num_hidden_layers": 2**40, "max_cache_len": 4}, ValueError, "num_hidden_layers"),
    ({"num_hidden_layers": -1, "max_cache_len": 4}, ValueError, "num_hidden_layers"),
    ({"num_hidden_layers": 1, "max_cache_len": 2**62}, kvcache.InvalidArgumentError, "max_cache_len"),
    ({"num_hidden_layers": 1, "max_cache_len": -5}, kvcache.InvalidArgumentError, "max_cache_len"),
    ({"num_hidden_layers": 1, "max_cache_len": 2**64}, OverflowError, "max_cache_len"),
])
def test_constructors_with_huge_sizes(kwargs, exc, fragment):
    with pytest.raises(exc, match=fragment):
        kvcache.StaticCache(**kwargs)


# ----------------------------------------------------------------------------------------------------- paths

def test_paths_with_a_nul_byte_are_refused_not_cut(tmp_path):
    cache = filled()
    cut = tmp_path / "a"
    bad = str(cut) + "\0b"
    refused(cache, lambda: cache.save(bad), kvcache.InvalidArgumentError, "path", "NUL")
    refused(cache, lambda: cache.restore(bad), kvcache.InvalidArgumentError, "path", "NUL")
    with pytest.raises(kvcache.InvalidArgumentError, match="path holds a NUL"):
        kvcache.load(bad)
    with pytest.raises(kvcache.InvalidArgumentError, match="directory holds a NUL"):
        kvcache.DiskTier(bad)
    with pytest.raises(TypeError, match="path"):
        cache.save(None)
    assert not cut.exists()  # nothing was written under the cut name
    cache.save(tmp_path / "ok.kvc")  # path-likes work
    assert kvcache.load(tmp_path / "ok.kvc").get_seq_length() == 3


# ------------------------------------------------------------------------------------------------------ pools

def make_pool(num_blocks=8):
    return kvcache.Pool(dtype=torch.float32, groups=[kvcache.PoolGroup("full", block_size=4, num_blocks=num_blocks)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=2, head_dim=8)] * 2, hash_seed=b"misuse")


def pool_with_sequence():
    """A pool and a sequence holding 3 reserved tokens."""
    pool = make_pool()
    seq = pool.sequence()
    seq.reserve([1, 2, 3])
    return pool, seq


def pool_state(pool):
    s = pool.stats()
    return (s.free_blocks, s.cached_blocks, s.used_blocks if hasattr(s, "used_blocks") else None)


def seq_state(seq):
    return (len(seq), seq.committed, pool_state(seq.pool))


SEQUENCE_CALLS = {
    "len": len,
    "committed": lambda s: s.committed,
    "reserve": lambda s: s.reserve([1, 2]),
    "commit": lambda s: s.commit(),
    "fork": lambda s: s.fork(),
    "truncate": lambda s: s.truncate(0),
    "match_prefix": lambda s: s.match_prefix([1, 2, 3]),
    "pin": lambda s: s.pin(),
    "gather": lambda s: s.gather(0),
    "save": lambda s: s.save(os.path.join(_saved.dir, "s.kvc")),
    "save_to": lambda s: s.save_to(lambda b: None),
}


@pytest.mark.parametrize("call", list(SEQUENCE_CALLS))
def test_a_closed_sequence_refuses_every_call(call):
    pool, seq = pool_with_sequence()
    seq.close()
    seq.close()  # twice: harmless
    with pytest.raises(ValueError, match="sequence is closed"):
        SEQUENCE_CALLS[call](seq)
    with pytest.raises(ValueError, match="sequence is closed"):
        pool.block_table([seq])
    with pytest.raises(ValueError, match="sequence is closed"):
        pool.blocks_needed([seq], 1)
    with pytest.raises(ValueError, match="sequence is closed"):
        seq.__enter__()
    other = pool.sequence()  # the pool works on
    assert len(other.reserve([7, 8])) == 2


@pytest.mark.parametrize("call", list(SEQUENCE_CALLS))
def test_sequences_after_their_pool_closed(call):
    pool, seq = pool_with_sequence()
    pool.close()
    pool.close()
    with pytest.raises(ValueError, match="pool is closed"):
        SEQUENCE_CALLS[call](seq)
    seq.close()  # closing after the pool is a no-op
    with pytest.raises(ValueError, match="pool is closed"):
        pool.sequence()
    with pytest.raises(ValueError, match="pool is closed"):
        pool.__enter__()
    assert repr(pool) == "Pool(closed)"


def test_pool_views_after_mutation_and_close():
    pool, seq = pool_with_sequence()
    table = pool.block_table([seq])
    csr = pool.block_table_csr([seq])
    keys, values = pool.layer_storage(0)
    seq.reserve([4, 5])  # changes the tables
    for view in (table, csr.indptr, csr.indices, csr.last_page_len):
        with pytest.raises(kvcache.StaleViewError):
            np.from_dlpack(view)
    assert np.from_dlpack(keys).shape == (8, 4, 2, 8)  # the storage never moves
    t = torch.from_dlpack(keys)
    pool.close()
    with pytest.raises(kvcache.StaleViewError, match="closed"):
        np.from_dlpack(keys)
    t.fill_(1.0)  # an exported tensor keeps the storage alive after close
    assert float(t.sum()) == t.numel()


@pytest.mark.parametrize("tokens, exc, fragment", [
    ([2**31], kvcache.InvalidArgumentError, "tokens[0]"), ([-1], kvcache.InvalidArgumentError, "tokens[0]"),
    ([1, 2**63], OverflowError, "tokens[1]"), ([None], TypeError, "tokens[0]"), (None, TypeError, "tokens"),
    (5, TypeError, "tokens"), (np.zeros(2, np.float32), TypeError, "tokens"),
    (np.zeros((2, 2), np.int32), ValueError, "tokens"), (list(range(10_000)), kvcache.OutOfMemoryError, "group 0"),
])
def test_reserve_and_match_prefix_with_bad_tokens(tokens, exc, fragment):
    pool, seq = pool_with_sequence()
    refused(seq, lambda: seq.reserve(tokens), exc, fragment, state=seq_state)
    empty = pool.sequence()
    if exc is not kvcache.OutOfMemoryError:
        refused(empty, lambda: empty.match_prefix(tokens), exc, fragment, state=seq_state)
    assert len(seq.reserve([4])) == 1  # both still work


@pytest.mark.parametrize("n, exc, fragment", [
    (2**62, IndexError, "num_tokens"), (2**64, OverflowError, "num_tokens"), (-1, kvcache.InvalidArgumentError,
                                                                               "num_tokens"),
    (None, TypeError, ""), (1.5, TypeError, ""),
])
def test_truncate_and_blocks_needed_with_bad_counts(n, exc, fragment):
    pool, seq = pool_with_sequence()
    refused(seq, lambda: seq.truncate(n), exc, fragment, state=seq_state)
    if n is not None and not isinstance(n, float) and n != 2**62:
        refused(seq, lambda: pool.blocks_needed([seq], n), (OverflowError, kvcache.InvalidArgumentError),
                "new_tokens", state=seq_state)
    refused(seq, lambda: pool.blocks_needed([seq], [1, 2]), kvcache.InvalidArgumentError, "new_tokens",
            state=seq_state)
    refused(seq, lambda: pool.blocks_needed([object()], [1]), TypeError, "sequences", state=seq_state)
    seq.truncate(1)
    assert len(seq) == 1


def test_pool_write_and_gather_with_wrong_inputs():
    pool = make_pool()
    seq = pool.sequence()
    slots = seq.reserve([1])
    k = [torch.zeros(1, 2, 8)] * 2
    cases = [
        (lambda: pool.write([torch.zeros(1, 2, 8, dtype=torch.float64)] * 2, k, slots), kvcache.DtypeMismatchError,
         "keys[0].dtype"),
        (lambda: pool.write([torch.zeros(1, 3, 8)] * 2, k, slots), kvcache.ShapeMismatchError, "keys[0]"),
        (lambda: pool.write(k[:1], k[:1], slots), kvcache.InvalidArgumentError, "keys has 1"),
        (lambda: pool.write(k, k, [2**40]), kvcache.InvalidArgumentError, "slot_mapping[0]"),
        (lambda: pool.write(k, k, [-2]), kvcache.InvalidArgumentError, "slot_mapping[0]"),
        (lambda: pool.write(k, k, [2**63]), OverflowError, "slot_mapping[0]"),
        (lambda: pool.write(k, k, [0.5]), TypeError, "slot_mapping[0]"),
        (lambda: pool.write(k, k, None), TypeError, "slot_mapping"),
        (lambda: seq.gather(2**40), IndexError, "layer"),
        (lambda: seq.gather(0, torch.zeros(1), torch.zeros(1)), kvcache.ShapeMismatchError, "keys"),
        (lambda: seq.save_to(5), TypeError, "write"),
        (lambda: pool.stats(2**62), kvcache.InvalidArgumentError, "group"),
        (lambda: pool.layer_storage(0, "XYZ"), kvcache.InvalidArgumentError, "layout"),
        (lambda: pool.load_sequence_buffer(None), TypeError, "data"),
        (lambda: pool.load_sequence_buffer(b"junk"), kvcache.IoError, "not a kvcache file"),
        (lambda: pool.load_sequence("/tmp/x\0y"), kvcache.InvalidArgumentError, "path"),
        (lambda: seq.save(os.path.join(_saved.dir, "s\0.kvc")), kvcache.InvalidArgumentError, "path"),
    ]
    for call, exc, fragment in cases:
        refused(seq, call, exc, fragment, state=seq_state)
    pool.write(k, k, slots)  # still works
    seq.commit()
    assert seq.committed == 1


def test_sequences_of_another_pool_are_refused():
    pool, other = make_pool(), make_pool()
    foreign = other.sequence()
    foreign.reserve([1])
    for call in (lambda: pool.block_table([foreign]), lambda: pool.blocks_needed([foreign], 1)):
        with pytest.raises(kvcache.InvalidArgumentError, match="another pool"):
            call()
    assert len(foreign) == 1 and len(pool.sequence().reserve([1])) == 1


# ------------------------------------------------------------------------------------------------------ tiers

def test_tiers_under_misuse(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_bytes(b"x")
    for args, exc, fragment in [
        (("",), kvcache.InvalidArgumentError, "directory"), ((None,), TypeError, "directory"),
        ((str(a_file),), kvcache.IoError, "directory"), ((b"/tmp",), kvcache.InvalidArgumentError, "directory"),
    ]:
        with pytest.raises(exc, match=fragment):
            kvcache.DiskTier(*args)
    for max_bytes in (-1, 2**64, 1.5, None):
        with pytest.raises(kvcache.InvalidArgumentError, match="max_bytes"):
            kvcache.DiskTier(str(tmp_path / "t"), max_bytes=max_bytes)
    pool = make_pool()
    tier = kvcache.DiskTier(str(tmp_path / "t"))
    with pytest.raises(kvcache.InvalidArgumentError, match="write"):
        pool.add_tier(tier, "sometimes")
    with pytest.raises(kvcache.InvalidArgumentError, match="tier"):
        pool.add_tier(str(tmp_path))
    pool.add_tier(tier)
    with pytest.raises(kvcache.InvalidArgumentError, match="given to a pool already"):
        pool.add_tier(tier)
    with pytest.raises(kvcache.InvalidArgumentError, match="given to a pool already"):
        make_pool().add_tier(tier)
    for index, exc in ((1, IndexError), (2**40, kvcache.InvalidArgumentError), (-1, kvcache.InvalidArgumentError)):
        with pytest.raises(exc, match="index"):
            pool.tier_stats(index)
    assert tier.stats().puts == 0
    pool.close()
    with pytest.raises(ValueError, match="pool is closed"):
        tier.stats()  # the tier died with its pool
    with pytest.raises(ValueError, match="pool is closed"):
        pool.add_tier(kvcache.DiskTier(str(tmp_path / "u")))
    with pytest.raises(ValueError, match="pool is closed"):
        kvcache.add_redis_tier(pool, "127.0.0.1:1")

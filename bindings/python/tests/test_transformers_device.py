"""Where the drop-in caches live: placed by their first tensors (or device=), dtype from the tensors, kept by deepcopy,
and the torch tensors the per-layer update returns (kvcache_torch.h). The same logic serves CUDA caches; their
tests are in test_gpu.py and run where a CUDA device is."""
from __future__ import annotations

import copy
import gc
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import kvcache  # noqa: E402
import kvcache.transformers as kvt  # noqa: E402

COMMON = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256)


def llama_config():
    return transformers.LlamaConfig(**COMMON)


def mistral_config():
    return transformers.MistralConfig(**COMMON, sliding_window=4)


def kv(tokens, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(1, 2, tokens, 8, generator=gen).to(dtype)


def test_a_cache_is_placed_by_its_first_tensors():
    cache = kvt.DynamicCache(config=llama_config())
    assert cache.device is None and cache.layers[0].device is None
    assert cache.get_seq_length() == 0 and cache.layers[0].keys is None  # the stand-in answers as an empty cache
    x = kv(3)
    keys, values = cache.update(x, x, 0)
    assert cache.device == torch.device("cpu") and cache.layers[1].device == torch.device("cpu")
    assert keys.device.type == "cpu" and torch.equal(keys, x) and torch.equal(values, x)


def test_device_argument_places_the_cache_at_construction():
    for cache in (kvt.DynamicCache(config=llama_config(), device="cpu"), kvt.DynamicCache(device=torch.device("cpu")),
                  kvt.StaticCache(llama_config(), max_cache_len=8, device="cpu"),
                  kvt.OffloadedCache(config=llama_config(), device="cpu")):
        assert cache.device == torch.device("cpu"), type(cache).__name__
    ed = kvt.EncoderDecoderCache(config=llama_config(), device="cpu")
    assert ed.self_attention_cache.device == torch.device("cpu")


def test_a_device_kvcache_cannot_hold_is_refused_and_the_cache_stays_unplaced():
    cache = kvt.DynamicCache(config=llama_config())
    meta = torch.zeros(1, 2, 3, 8, device="meta")
    with pytest.raises(ValueError, match="'meta'.*CPU or a CUDA/ROCm device"):
        cache.update(meta, meta, 0)
    assert cache.device is None
    x = kv(2)
    assert torch.equal(cache.update(x, x, 0)[0], x)
    with pytest.raises(ValueError, match="device 'mps'"):
        kvt.DynamicCache(device="mps")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_layers_take_the_dtype_of_their_first_tensors(dtype):
    cache = kvt.DynamicCache(config=llama_config())
    x = kv(3, dtype)
    keys, _ = cache.update(x, x, 0)
    assert keys.dtype == dtype and cache.layers[0].keys.dtype == dtype
    assert cache.kvcache.layer_info(0).dtype.name.lower() == str(dtype).replace("torch.", "")
    with pytest.raises(kvcache.DtypeMismatchError):  # as a transformers layer, the first dtype stays
        cache.update(kv(1, torch.float64 if dtype != torch.float32 else torch.float16), kv(1), 0)
    assert cache.get_seq_length() == 3


def test_early_initialization_places_the_cache_on_its_device():
    cache = kvt.StaticCache(llama_config(), max_cache_len=6)
    cache.early_initialization(batch_size=1, num_heads=2, head_dim=8, dtype=torch.bfloat16, device="cpu")
    assert cache.device == torch.device("cpu") and cache.is_initialized
    assert cache.layers[0].keys.shape == (1, 2, 6, 8) and cache.layers[0].keys.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="one cache lives on one device"):
        cache.early_initialization(1, 2, 8, torch.bfloat16, device=torch.device("cuda", 3))


def test_ddp_cache_data_places_the_cache_on_the_tensors_device():
    x = kv(4)
    cache = kvt.DynamicCache([(x, x), (x, x)])
    assert cache.device == torch.device("cpu") and cache.get_seq_length(1) == 4
    assert torch.equal(cache.layers[1].values, x)


def test_deepcopy_keeps_the_device_and_an_unplaced_cache_stays_unplaced():
    placed = kvt.StaticCache(llama_config(), max_cache_len=8, device="cpu")
    x = kv(3)
    placed.update(x, x, 0)
    for clone in (copy.deepcopy(placed), copy.copy(placed)):
        assert clone.device == torch.device("cpu") and clone.max_cache_len == 8
        assert clone.get_seq_length() == 3 and torch.equal(clone.layers[0].keys[:, :, :3], x)
        assert clone.layers[0].keys.data_ptr() != placed.layers[0].keys.data_ptr()
    lazy = kvt.DynamicCache(config=llama_config())
    lazy.activate_past_recording()
    clone = copy.deepcopy(lazy)
    assert clone.device is None and clone._recording
    clone.update(x, x, 0)
    assert clone.device == torch.device("cpu") and lazy.device is None


def test_placing_keeps_what_was_switched_on_before():
    cache = kvt.DynamicCache(config=mistral_config())
    cache.activate_past_recording()
    x = kv(6)
    cache.update(x, x, 0)
    assert cache.kvcache.layer_info(0).records_past  # the sliding layer keeps every token for a rollback
    assert cache.layers[0].keys.shape[2] == 6


def test_static_layers_return_the_same_tensors_at_every_step():
    cache = kvt.StaticCache(llama_config(), max_cache_len=8)
    first = cache.update(kv(3), kv(3), 0)
    ptr = first[0].data_ptr()
    for step in range(3):
        out = cache.update(kv(1, seed=step), kv(1, seed=step), 0)
        assert out[0] is first[0] and out[1] is first[1] and out[0].data_ptr() == ptr
    assert torch.equal(first[0][:, :, 3:4], kv(1, seed=0))
    assert cache.layers[0].keys.data_ptr() == ptr
    cache.reset()
    assert cache.update(kv(1), kv(1), 0)[0] is first[0]  # reset zeroes in place: same memory, same tensors


def test_dynamic_layers_return_the_grown_history():
    cache = kvt.DynamicCache(config=llama_config())
    hist = kv(3)
    cache.update(hist, hist, 0)
    for step in range(4):
        x = kv(1, seed=10 + step)
        keys, _ = cache.update(x, x, 0)
        hist = torch.cat([hist, x], dim=2)
        assert torch.equal(keys, hist)
    stored = cache.layers[0].keys
    assert stored is cache.layers[0].keys  # an unchanged layer view is the same tensor
    cache.crop(-2)
    assert torch.equal(cache.layers[0].keys, hist[:, :, :-2])


def test_static_cache_position_is_honoured():
    cache = kvt.StaticCache(llama_config(), max_cache_len=8)
    x = kv(2)
    keys, _ = cache.update(x, x, 0, {"cache_position": torch.tensor([4, 5])})
    assert torch.equal(keys[:, :, 4:6], x) and not keys[:, :, :4].any()


def test_inputs_that_require_grad_are_stored_detached():
    cache = kvt.DynamicCache()
    x = kv(3).requires_grad_()
    keys, _ = cache.update(x, x * 2, 0)
    assert not keys.requires_grad and torch.equal(keys, x.detach())


def test_a_failed_update_leaves_the_cache_and_its_tensors_as_they_were():
    cache = kvt.DynamicCache(config=llama_config())
    x = kv(3)
    keys, _ = cache.update(x, x, 0)
    bad = torch.zeros(1, 2, 1, 4)
    with pytest.raises(kvcache.ShapeMismatchError):
        cache.update(bad, bad, 0)
    with pytest.raises(kvcache.OutOfRangeError):
        cache.update(x, x, -1)
    assert cache.get_seq_length() == 3 and torch.equal(cache.layers[0].keys, x) and torch.equal(keys, x)


def test_the_torch_tensor_memory_does_not_keep_a_dropped_cache_alive():
    cache = kvt.DynamicCache(config=llama_config())
    x = kv(3)
    cache.update(x, x, 0)
    static = kvt.StaticCache(llama_config(), max_cache_len=4)
    static.update(x, x, 1)
    handles = [cache.kvcache._handle, static.kvcache._handle]
    out = cache.update(x, x, 0)
    del cache, static
    gc.collect()
    held, same = sys.getrefcount(handles[0]), torch.equal(out[0][:, :, 3:], x)  # (no tensor left in pytest's locals)
    assert held > 2 and same  # the returned tensors hold the cache's memory
    del out
    gc.collect()
    refs = sys.getrefcount(handles[0]), sys.getrefcount(handles[1])  # (outside assert: pytest keeps its operands)
    assert refs == (2, 2)  # only the list `handles` and getrefcount's argument are left


def test_generate_with_a_cache_placed_by_the_model():
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(llama_config()).eval()
    ids = torch.tensor([[1, 2, 3, 4]])
    want = model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    for cache in (kvt.DynamicCache(config=model.config), kvt.StaticCache(model.config, max_cache_len=16),
                  kvt.DynamicCache(config=model.config, device="cpu")):
        got = model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False, past_key_values=cache)
        assert torch.equal(got, want), type(cache).__name__
        assert cache.device == torch.device("cpu")

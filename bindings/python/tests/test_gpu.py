"""Caches on a CUDA device with torch CUDA tensors, and the stream API.

The device tests run where torch sees a CUDA device and kvcache can load its CUDA plugin (KVC_BACKEND_PATH names
the directory of libkvcache-cuda.so when it is not next to the package); elsewhere they are skipped, with the
reason. The stream API's checks that need no device run everywhere.
"""
from __future__ import annotations

import copy

import pytest

import kvcache

torch = pytest.importorskip("torch")

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="SKIPPED: no CUDA device visible to torch")


def _plugin_problem():
    """Why kvcache cannot make CUDA caches here, or None when it can."""
    try:
        kvcache.DynamicCache(device="cuda:0").close()
    except kvcache.KvcacheError as e:
        return str(e)
    return None


if not HAS_CUDA:
    needs_plugin = needs_cuda
else:
    PLUGIN_PROBLEM = _plugin_problem()
    needs_plugin = pytest.mark.skipif(
        PLUGIN_PROBLEM is not None,
        reason=f"SKIPPED: torch sees a CUDA device but kvcache cannot make CUDA caches ({PLUGIN_PROBLEM}); set "
               f"KVC_BACKEND_PATH to the directory of libkvcache-cuda.so")

DEV = "cuda:0"


def rand(*shape, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    return torch.randn(*shape, generator=gen, device=DEV, dtype=torch.float32).to(dtype)


def host(view):
    """A view's contents as a CPU tensor, read on the current stream: always a copy. (`.cpu()` alone copies a CUDA
    view but returns a CPU view itself, the cache's memory, which later mutating calls rewrite: a view is valid
    only until the next one, README "Views".)"""
    return torch.from_dlpack(view).to("cpu", copy=True)


def busy(stream, cycles=10**8):
    """Keeps `stream` busy (10^8 GPU clock cycles: tens of milliseconds), so that unordered work elsewhere overtakes."""
    with torch.cuda.stream(stream):
        torch.cuda._sleep(cycles)


# ------------------------------------------------------------- anywhere


def test_host_copies_a_cpu_view_that_later_calls_rewrite():
    """host() is the CPU reference of test_results_equal_the_cpu_cache: it must not alias the cache's memory."""
    cache = kvcache.DynamicCache(num_hidden_layers=1)
    k = torch.arange(2 * 2 * 3 * 4, dtype=torch.float32).reshape(2, 2, 3, 4)
    keys, _ = cache.update(k, k, 0)
    view, kept = torch.from_dlpack(keys), host(keys)
    assert view.cpu().data_ptr() == view.data_ptr()  # .cpu() of a CPU view: the same memory
    assert kept.data_ptr() != view.data_ptr()
    cache.reorder_cache([1, 0])  # on the CPU this rewrites the stored rows in place, under the old view
    assert torch.equal(kept, k)


def test_stream_of_a_cpu_cache_is_the_default_and_only_none_binds():
    cache = kvcache.DynamicCache()
    assert cache.stream == 0
    cache.stream = None
    cache.set_stream(0)
    with pytest.raises(kvcache.InvalidArgumentError) as info:
        cache.stream = 0x1234
    assert "CPU" in str(info.value) and info.value.code == kvcache._lib.KVC_ERROR_INVALID_ARGUMENT
    with pytest.raises(kvcache.InvalidArgumentError):
        cache.stream = -1
    with pytest.raises(TypeError):
        cache.stream = "stream 7"


def test_stream_objects_are_read_by_their_handle():
    class TorchLike:
        cuda_stream = 0

    class CupyLike:
        ptr = 0

    cache = kvcache.DynamicCache()
    cache.stream = TorchLike()
    cache.stream = CupyLike()
    assert cache.stream == 0
    TorchLike.cuda_stream = 0x40
    with pytest.raises(kvcache.InvalidArgumentError):
        cache.stream = TorchLike()


def test_binding_a_stream_keeps_views_valid():
    cache = kvcache.DynamicCache()
    x = torch.ones(1, 2, 3, 4)
    keys, _ = cache.update(x, x, 0)
    cache.stream = None
    assert keys.is_valid
    assert torch.equal(torch.from_dlpack(keys), x)


def test_a_closed_cache_has_no_stream():
    cache = kvcache.DynamicCache()
    cache.close()
    with pytest.raises(ValueError):
        cache.stream
    with pytest.raises(ValueError):
        cache.stream = None


def test_encoder_decoder_binds_both_caches():
    ed = kvcache.EncoderDecoderCache(kvcache.DynamicCache(), kvcache.DynamicCache())
    ed.stream = None
    assert ed.stream == 0 and ed.cross_attention_cache.stream == 0


# --------------------------------------------------------------- device


@needs_cuda
def test_cpu_cache_refuses_cuda_tensors_without_copying():
    cache = kvcache.DynamicCache()
    x = torch.ones(1, 2, 3, 4, device="cuda")
    with pytest.raises(kvcache.DeviceMismatchError) as info:
        cache.update(x, x, 0)
    assert info.value.code == kvcache._lib.KVC_ERROR_DEVICE_MISMATCH
    assert len(cache) == 0 or not cache.layer_info(0).is_initialized


@needs_cuda
def test_cuda_caches_need_the_cuda_backend():
    if "cuda" in kvcache.features():
        cache = kvcache.DynamicCache(device="cuda:0")
        x = torch.ones(1, 2, 3, 4, device="cuda")
        keys, _ = cache.update(x, x, 0)
        assert keys.__dlpack_device__() == (2, 0)
        assert torch.equal(torch.from_dlpack(keys), x)
    else:
        with pytest.raises(kvcache.NoDeviceError):
            kvcache.DynamicCache(device="cuda:0")


@needs_plugin
def test_a_cuda_cache_refuses_cpu_tensors():
    cache = kvcache.DynamicCache(device=DEV)
    x = torch.ones(1, 2, 3, 4)
    with pytest.raises(kvcache.DeviceMismatchError):
        cache.update(x, x, 0)


@needs_plugin
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_views_are_zero_copy_cuda_tensors(dtype):
    cache = kvcache.DynamicCache(device=DEV)
    k, v = rand(2, 4, 5, 16, dtype=dtype, seed=1), rand(2, 4, 5, 16, dtype=dtype, seed=2)
    keys, values = cache.update(k, v, 0)
    assert keys.device == ("cuda", 0) and keys.__dlpack_device__() == (2, 0)
    tk, tv = torch.from_dlpack(keys), torch.from_dlpack(values)
    assert tk.is_cuda and tk.dtype == dtype and tk.shape == k.shape
    assert tk.data_ptr() == keys.data_ptr  # the cache's memory, not a copy
    assert tk.data_ptr() != k.data_ptr()   # ... which holds a copy of the input
    assert torch.equal(tk, k) and torch.equal(tv, v)
    stored = cache.layer_view(0)
    assert torch.from_dlpack(stored.keys).data_ptr() == tk.data_ptr()

    k2 = rand(2, 4, 1, 16, dtype=dtype, seed=3)
    keys, _ = cache.update(k2, k2, 0)
    assert torch.equal(torch.from_dlpack(keys), torch.cat([k, k2], dim=2))


def run_sequence(cache, device, dtype, croppable, batch=2):
    """Prefill, decode steps, crop, beam reorder, update_all: every view right after its call, copied to the CPU."""
    seen = []

    def t(length, seed):
        return rand(batch, 2, length, 8, dtype=dtype, seed=seed).to(device)

    def keep(kv):  # before the next mutating call, which makes the views stale
        seen.append((host(kv.keys), host(kv.values)))

    for i in range(2):
        keep(cache.update(t(5, 10 + i), t(5, 20 + i), i))
    for step in range(3):
        for i in range(2):
            keep(cache.update(t(1, 30 + 2 * step + i), t(1, 40 + 2 * step + i), i))
    if croppable:
        cache.crop(-1)
    cache.reorder_cache([1, 0][:batch])
    for kv in cache.update_all([t(1, 60), t(1, 61)], [t(1, 62), t(1, 63)]):
        keep(kv)
    for i in range(2):
        keep(cache.update(t(2, 70 + i), t(2, 80 + i), i))
    return seen


# name -> (factory(device), whether crop(-1) applies: not to static layers, nor to sliding ones past their window)
CACHES = {
    "dynamic": (lambda device: kvcache.DynamicCache(num_hidden_layers=2, device=device), True),
    "static": (lambda device: kvcache.StaticCache(num_hidden_layers=2, max_cache_len=12, device=device), False),
    "dynamic_sliding": (lambda device: kvcache.DynamicCache(
        num_hidden_layers=2, layer_types=["full_attention", "sliding_attention"], sliding_window=4, device=device),
        False),
    "static_sliding": (lambda device: kvcache.HybridCache(
        num_hidden_layers=2, sliding_window=4, sliding_window_pattern=2, max_cache_len=12, device=device), False),
    "offloaded": (lambda device: kvcache.OffloadedCache(num_hidden_layers=2, device=device), True),
}


@needs_plugin
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", sorted(CACHES))
def test_results_equal_the_cpu_cache(kind, dtype):
    make, croppable = CACHES[kind]
    on_gpu = run_sequence(make(DEV), DEV, dtype, croppable)
    on_cpu = run_sequence(make("cpu"), "cpu", dtype, croppable)
    assert len(on_gpu) == len(on_cpu)
    for i, ((gk, gv), (ck, cv)) in enumerate(zip(on_gpu, on_cpu)):
        assert torch.equal(gk, ck) and torch.equal(gv, cv), f"{kind}: view {i} differs from the CPU cache's"


@needs_plugin
def test_offloaded_layers_are_pinned_host_views_read_after_their_copy():
    np = pytest.importorskip("numpy")
    cache = kvcache.OffloadedCache(num_hidden_layers=2, device=DEV)
    k0, k1 = rand(1, 2, 1, 64, dtype=torch.float32, seed=95), rand(1, 2, 4096, 64, dtype=torch.float32, seed=96)
    cache.update(k0, k0, 0)
    cache.update(k1, k1, 1)  # then layer 1 is offloaded: its K/V copied to pinned host memory on the cache's stream
    assert cache.layer_info(1).is_offloaded
    keys = cache.layer_view(1).keys
    assert keys.device == ("cuda_host", 0)
    assert np.array_equal(np.from_dlpack(keys), k1.cpu().numpy())  # __dlpack__ waits for the copy
    memory = cache.memory()
    assert memory.bytes_host > 0 and memory.bytes_device > 0


@needs_plugin
def test_batch_operations_and_clone_equal_the_cpu_cache():
    def run(device):
        cache = kvcache.DynamicCache(num_hidden_layers=1, device=device)
        x = rand(3, 2, 4, 8, dtype=torch.float16, seed=5).to(device)
        cache.update(x, x * 2, 0)
        cache.batch_repeat_interleave(2)
        cache.batch_select_indices([5, 0, 3])
        copy = cache.clone()
        cache.reset()
        out = [host(v) for v in copy.layer_view(0)]
        assert cache.get_seq_length() == 0
        return out

    for g, c in zip(run(DEV), run("cpu")):
        assert torch.equal(g, c)


@needs_plugin
def test_update_all_equals_per_layer_updates():
    layers = 4
    ks = [rand(1, 2, 3, 8, seed=70 + i) for i in range(layers)]
    vs = [rand(1, 2, 3, 8, seed=80 + i) for i in range(layers)]
    a = kvcache.DynamicCache(num_hidden_layers=layers, device=DEV)
    b = kvcache.DynamicCache(num_hidden_layers=layers, device=DEV)
    out_all = a.update_all(ks, vs)
    for i in range(layers):
        kv = b.update(ks[i], vs[i], i)
        assert torch.equal(torch.from_dlpack(kv.keys), torch.from_dlpack(out_all[i].keys))
        assert torch.equal(torch.from_dlpack(kv.values), vs[i])


@needs_plugin
def test_cache_binds_to_a_torch_stream():
    stream = torch.cuda.Stream()
    cache = kvcache.DynamicCache(device=DEV)
    cache.stream = stream
    assert cache.stream == stream.cuda_stream != 0
    cache.stream = torch.cuda.default_stream()
    assert cache.stream == 0
    cache.set_stream(stream.cuda_stream)  # a bare handle works too
    assert cache.stream == stream.cuda_stream
    with torch.cuda.stream(stream):
        busy(stream)  # the update is queued behind this: nothing may read it before the stream gets there
        k = rand(1, 2, 64, 8, seed=90)
        keys, _ = cache.update(k, k, 0)
        assert torch.equal(torch.from_dlpack(keys), k)
    assert cache.clone().stream == stream.cuda_stream


@needs_plugin
def test_views_exported_to_another_stream_are_ordered_after_the_cache_stream():
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    cache = kvcache.DynamicCache(device=DEV)
    cache.stream = producer
    k = rand(1, 8, 4096, 128, seed=91)
    producer.wait_stream(torch.cuda.current_stream())  # k was made on the current stream
    busy(producer)
    keys, _ = cache.update(k, k, 0)  # queued on the producer stream, behind ~50 ms of sleep
    with torch.cuda.stream(consumer):
        got = torch.from_dlpack(keys).clone()  # __dlpack__(stream=consumer) must make the consumer wait
    consumer.synchronize()
    assert torch.equal(got, k)


@needs_plugin
def test_rebinding_orders_new_work_after_the_old_stream():
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    cache = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=4, device=DEV)
    x, y = rand(1, 2, 1, 8, seed=92), rand(1, 2, 1, 8, seed=93)
    first.wait_stream(torch.cuda.current_stream())
    second.wait_stream(torch.cuda.current_stream())
    cache.stream = first
    busy(first)
    cache.update(x, x, 0, {"cache_position": [0]})  # slot 0 <- x, late: behind the sleep on `first`
    cache.stream = second
    keys, _ = cache.update(y, y, 0, {"cache_position": [0]})  # slot 0 <- y, must land after x
    torch.cuda.synchronize()
    assert torch.equal(host(keys)[:, :, :1], y.cpu())


@needs_plugin
def test_a_device_view_cannot_be_an_input_and_copies_need_the_cpu():
    cache = kvcache.DynamicCache(device=DEV)
    x = rand(1, 2, 3, 8, seed=94)
    keys, _ = cache.update(x, x, 0)
    with pytest.raises(ValueError):
        cache.update(keys, keys, 0)
    with pytest.raises(BufferError):
        keys.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        keys.__dlpack__(stream=0)  # DLPack: 0 is ambiguous for CUDA
    assert torch.equal(torch.from_dlpack(keys), x)  # the failed calls changed nothing


# ------------------------------------------------- kvcache.transformers on CUDA


def _tiny_llama_config():
    transformers = pytest.importorskip("transformers")
    return transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                    initializer_range=0.6, bos_token_id=1, eos_token_id=None, pad_token_id=0)


def _tiny_llama(dtype=torch.bfloat16):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(_tiny_llama_config()).eval().to(DEV, dtype)
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    return model


@needs_plugin
def test_drop_in_caches_are_placed_on_the_device_of_their_first_tensors():
    kvt = pytest.importorskip("kvcache.transformers")
    cache = kvt.DynamicCache(config=_tiny_llama_config())
    assert cache.device is None
    x = rand(1, 2, 3, 16, seed=100)
    keys, values = cache.update(x, x, 0)
    assert cache.device == torch.device(DEV) and cache.kvcache.layer_info(0).is_initialized
    assert keys.is_cuda and keys.dtype == torch.bfloat16 and torch.equal(keys, x) and torch.equal(values, x)
    assert keys.data_ptr() != x.data_ptr()
    y = rand(1, 2, 1, 16, seed=101)
    keys, _ = cache.update(y, y, 0)
    assert torch.equal(keys, torch.cat([x, y], dim=2)) and cache.layers[0].keys.is_cuda
    with pytest.raises(kvcache.DeviceMismatchError):  # one cache, one device
        cache.update(y.cpu(), y.cpu(), 1)


@needs_plugin
def test_drop_in_static_cache_made_on_the_device_keeps_its_addresses():
    kvt = pytest.importorskip("kvcache.transformers")
    cache = kvt.StaticCache(_tiny_llama_config(), max_cache_len=8, device="cuda")
    assert cache.device == torch.device(DEV)
    first = cache.update(rand(1, 2, 3, 16, seed=102), rand(1, 2, 3, 16, seed=103), 0)
    ptr = first[0].data_ptr()
    for step in range(3):
        out = cache.update(rand(1, 2, 1, 16, seed=104 + step), rand(1, 2, 1, 16, seed=104 + step), 0)
        assert out[0] is first[0] and out[0].data_ptr() == ptr
    cache.reset()
    assert cache.update(rand(1, 2, 1, 16), rand(1, 2, 1, 16), 0)[0].data_ptr() == ptr
    other = kvt.StaticCache(_tiny_llama_config(), max_cache_len=8)
    other.early_initialization(1, 2, 16, torch.bfloat16, torch.device(DEV))
    assert other.device == torch.device(DEV) and other.layers[1].keys.is_cuda


@needs_plugin
def test_drop_in_cache_follows_torchs_current_stream():
    kvt = pytest.importorskip("kvcache.transformers")
    cache = kvt.DynamicCache()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x = rand(1, 2, 4, 8, seed=110)
        busy(side)  # the update's copy waits behind this on `side`; reading on `side` sees it done
        keys, _ = cache.update(x, x, 0)
        assert cache.kvcache.stream == side.cuda_stream
        got = keys.clone()
    side.synchronize()
    assert torch.equal(got, x)
    cache.update(x[:, :, :1], x[:, :, :1], 0)
    assert cache.kvcache.stream == torch.cuda.current_stream().cuda_stream


@needs_plugin
def test_drop_in_whole_cache_operations_take_device_tensors():
    kvt = pytest.importorskip("kvcache.transformers")
    cache = kvt.DynamicCache(config=_tiny_llama_config())
    x = rand(3, 2, 4, 8, seed=120)
    cache.update(x, x, 0)
    cache.reorder_cache(torch.tensor([2, 0, 1], device=DEV))
    assert torch.equal(cache.layers[0].keys, x[[2, 0, 1]])
    cache.batch_select_indices(torch.tensor([True, False, True], device=DEV))
    assert torch.equal(cache.layers[0].keys, x[[2, 1]])
    cache.batch_repeat_interleave(2)
    cache.crop(-1)
    assert cache.layers[0].keys.shape == (4, 2, 3, 8) and cache.layers[0].keys.is_cuda
    clone = copy.deepcopy(cache)
    assert clone.device == torch.device(DEV) and torch.equal(clone.layers[0].keys, cache.layers[0].keys)
    cache.reset()
    assert cache.get_seq_length() == 0 and clone.get_seq_length() == 3


@needs_plugin
@pytest.mark.parametrize("cache_name", ["DynamicCache", "StaticCache", "OffloadedCache"])
def test_drop_in_generates_the_tokens_of_transformers_caches_on_cuda_bf16(cache_name):
    kvt = pytest.importorskip("kvcache.transformers")
    model = _tiny_llama()
    ids = torch.tensor([[1, 5, 9, 2, 7]], device=DEV)
    kw = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False)
    want = model.generate(ids, **kw)
    if cache_name == "StaticCache":
        cache = kvt.StaticCache(model.config, max_cache_len=16)
    else:
        cache = getattr(kvt, cache_name)(config=model.config)
    got = model.generate(ids, past_key_values=cache, **kw)
    assert torch.equal(got, want) and cache.device == torch.device(DEV)
    beams = model.generate(ids, num_beams=3, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    got = model.generate(ids, num_beams=3, max_new_tokens=6, min_new_tokens=6, do_sample=False,
                         past_key_values=kvt.DynamicCache(config=model.config))
    assert torch.equal(got, beams)


@needs_plugin
@pytest.mark.parametrize("name,args", [("DynamicLayer", ()), ("StaticLayer", (8,)),
                                       ("DynamicSlidingWindowLayer", (4,)), ("StaticSlidingWindowLayer", (8, 4))])
def test_drop_in_layers_made_alone_and_composed_follow_transformers_on_cuda(name, args):
    kvt = pytest.importorskip("kvcache.transformers")
    from transformers import cache_utils as tcu
    ref, alone = getattr(tcu, name)(*args), getattr(kvt, name)(*args)
    composed = kvt.Cache(layers=[kvt.DynamicLayer(), getattr(kvt, name)(*args)])
    seen = 0
    for n in (3, 1, 1, 2):
        x = rand(2, 2, n, 8, seed=130 + seen)
        positions = {"cache_position": torch.arange(seen, seen + n, device=DEV)}
        want = ref.update(x, x, positions)[0]
        assert torch.equal(alone.update(x, x, positions)[0], want)
        assert torch.equal(composed.update(x, x, 1, positions)[0], want)
        seen += n
    assert isinstance(alone, getattr(tcu, name)) and alone.device == torch.device(DEV) and alone.keys.is_cuda
    assert int(alone.get_seq_length()) == int(ref.get_seq_length()) == composed.get_seq_length(1)
    alone.reorder_cache(torch.tensor([1, 0], device=DEV))
    ref.reorder_cache(torch.tensor([1, 0], device=DEV))
    assert torch.equal(alone.keys, ref.keys)

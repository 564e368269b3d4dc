"""Dummy layers in the drop-in (transformers 5.23's DummyLayer: layer types "dummy", "moe", "mlp" and the layers
that kv_sharing_modes marks "reuse"): a kvcache.transformers cache built from such a config has the layers, answers
and results of transformers' own cache, step by step. Releases without DummyLayer give "moe"/"mlp" blocks the
LinearAttentionLayer of their own mapping (5.14 to 5.22), which the drop-in follows too, and refuse "dummy"."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers import cache_utils  # noqa: E402

import kvcache.transformers as kvt  # noqa: E402
from transformers_release import HAS_DUMMY_LAYER, HAS_LINEAR_LAYERS, LINEAR_SKIP_REASON, VERSION  # noqa: E402

needs_dummy_layer = pytest.mark.skipif(
    not HAS_DUMMY_LAYER, reason=f"SKIPPED: transformers {VERSION} has no DummyLayer (5.23 on) to compare with")

HEADS, HEAD_DIM = 2, 4
_LINEAR_MIXIN = getattr(cache_utils, "LinearAttentionCacheLayerMixin", ())


def config(layer_types, **extra):
    cfg = transformers.PretrainedConfig(num_hidden_layers=len(layer_types), num_attention_heads=HEADS,
                                        num_key_value_heads=HEADS, head_dim=HEAD_DIM, hidden_size=HEADS * HEAD_DIM,
                                        sliding_window=3, **extra)
    cfg.layer_types = layer_types  # after the validator, which knows "moe" but not "mlp" or "dummy" (NemotronH's does)
    return cfg


# Dummy layers first (get_seq_length(0) and get_mask_sizes(q, 0) answer for the first attention layer), between
# attention layers, next to a linear one, and from kv_sharing_modes.
CONFIGS = {
    "moe-first": lambda: config(["moe", "full_attention", "mlp", "sliding_attention", "dummy"]),
    "with-linear": lambda: config(["linear_attention", "mlp", "full_attention", "moe"]),
    "kv-sharing": lambda: config(["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                                 kv_sharing_modes=[None, "store", "reuse", "reuse"]),
}


def tokens(n, start, batch=2):
    return (torch.arange(batch * HEADS * n * HEAD_DIM, dtype=torch.float32) + start).reshape(batch, HEADS, n,
                                                                                               HEAD_DIM)


def outcome(fn):
    """What a call gives: its result, or the type of what it raised (both caches must raise alike)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the exception's type is the observation
        return type(e)


def same(a, b):
    """Equal results; an exception kvcache raises may be a subclass of transformers' (InvalidArgumentError is a
    ValueError)."""
    if isinstance(a, type) and isinstance(b, type):
        return issubclass(b, a)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def observe(cache):
    """Everything transformers' code reads off a cache and its layers, per layer and as a whole.

    Left out, as they are not about dummy layers: a linear layer's own class and attributes (the drop-in's
    linear layers are not compileable) and so the compileability of a cache with
    one; a layer's is_initialized but a dummy's (a reset dynamic layer is uninitialized in 5.23 where kvcache's
    stays initialized and empty, difference 1); empty keys (an early-initialized DynamicLayer holds
    torch.tensor([]), the drop-in's [B, H, 0, D])."""
    n = len(cache.layers)
    per_layer = []
    any_linear = False
    for i, layer in enumerate(cache.layers):
        answers = dict(
            max_length=outcome(layer.get_max_length),
            seq_length=outcome(lambda i=i: int(cache.get_seq_length(i))),  # a tensor from a StaticLayer
            mask_sizes=outcome(lambda i=i: tuple(int(x) for x in cache.get_mask_sizes(2, i))),
            cache_max_length=cache.get_max_length(i))
        if isinstance(layer, _LINEAR_MIXIN):
            any_linear = True
            per_layer.append(dict(linear=True, **answers))
            continue
        dummy = isinstance(layer, cache_utils.DummyLayer) if HAS_DUMMY_LAYER else False
        per_layer.append(dict(
            dummy=dummy, attention=isinstance(layer, cache_utils.CacheLayerMixin),
            has_is_sliding=hasattr(layer, "is_sliding"),
            compileable=layer.is_compileable, croppable=getattr(layer, "is_croppable", None),
            initialized=layer.is_initialized if dummy else None, early_init=layer.supports_early_init,
            keys=layer.keys if layer.keys is not None and layer.keys.numel() else None,
            values=layer.values if layer.values is not None and layer.values.numel() else None, **answers))
    whole = dict(n=n, is_sliding=cache.is_sliding, is_linear=cache.is_linear, is_dummy=getattr(cache, "is_dummy", [False] * n),  # (5.23 on)
                 is_compileable=None if any_linear else cache.is_compileable, is_initialized=cache.is_initialized,
                 is_croppable=outcome(lambda: cache.is_croppable), max_length=cache.get_max_length(),
                 seq_length=outcome(lambda: int(cache.get_seq_length())),
                 batch_size=outcome(lambda: cache.batch_size))
    return whole, per_layer


def assert_same(ref, got, when, ignore=()):
    (rw, rl), (gw, gl) = observe(ref), observe(got)
    for name in ignore:
        rw.pop(name), gw.pop(name)
    assert rw == gw, f"{when}: cache\n{rw}\n{gw}"
    for i, (r, g) in enumerate(zip(rl, gl)):
        assert r.keys() == g.keys() and all(same(r[k], g[k]) for k in r), f"{when}: layer {i}\n{r}\n{g}"


def pair_of(name, static):
    cfg = CONFIGS[name]()
    if static:
        return transformers.StaticCache(config=cfg, max_cache_len=8), kvt.StaticCache(cfg, 8)
    return transformers.DynamicCache(config=cfg), kvt.DynamicCache(config=cfg)


def attention_layers(cache):
    return [i for i, layer in enumerate(cache.layers) if isinstance(layer, cache_utils.CacheLayerMixin)]


def step(ref, got, n, start, when):
    """One update of every attention layer (the same tokens into both caches), then every dummy layer refused."""
    for i in attention_layers(ref):
        r = ref.update(tokens(n, start + i), tokens(n, start - i), i)
        g = got.update(tokens(n, start + i), tokens(n, start - i), i)
        assert same(r, g), f"{when}: update of layer {i}"
    for i, dummy in enumerate(ref.is_dummy):
        if dummy:
            assert ref.update(None, None, i) == (None, None) and got.update(None, None, i) == (None, None)
            with pytest.raises(NotImplementedError, match="Dummy layer"):
                ref.update(tokens(n, 0), tokens(n, 0), i)
            with pytest.raises(NotImplementedError, match="Dummy layer"):
                got.update(tokens(n, 0), tokens(n, 0), i)
    assert_same(ref, got, when)


@needs_dummy_layer
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_dummy_layers_behave_as_transformers(name, static):
    if name == "with-linear" and not HAS_LINEAR_LAYERS:
        pytest.skip(LINEAR_SKIP_REASON)
    ref, got = pair_of(name, static)
    assert any(ref.is_dummy), "the config must give transformers dummy layers"
    dummies = [layer for layer in got.layers if isinstance(layer, cache_utils.DummyLayer)]
    assert [type(layer).__name__ for layer in dummies] == ["DummyLayer"] * sum(ref.is_dummy)
    assert all(isinstance(layer, kvt.KvcacheDummyLayer) for layer in dummies)
    assert_same(ref, got, "fresh")
    step(ref, got, 2, 0, "prefill")  # within the sliding window: transformers can crop it
    operations = [("reorder_cache", (torch.tensor([1, 0]),)), ("batch_repeat_interleave", (2,)),
                  ("batch_select_indices", (torch.tensor([0, 3]),)), ("crop", (-1,))]
    if any(ref.is_linear):  # transformers' linear layers have no batch_repeat/select (difference 45)
        operations = [(op, args) for op, args in operations if not op.startswith("batch_")]
    for op, args in operations:
        r, g = outcome(lambda: getattr(ref, op)(*args)), outcome(lambda: getattr(got, op)(*args))
        assert same(r, g), f"{op}: transformers {r}, kvcache {g}"
        assert_same(ref, got, op)
    step(ref, got, 1, 100, "decode")
    ref_copy, got_copy = copy.deepcopy(ref), copy.deepcopy(got)
    assert isinstance(got_copy.layers[ref.is_dummy.index(True)], kvt.KvcacheDummyLayer)
    assert_same(ref_copy, got_copy, "deepcopy")
    ref.reset(), got.reset()
    assert_same(ref, got, "reset", ignore=("is_initialized",))  # difference 1 (see observe)
    step(ref, got, 2, 300, "after reset")


@needs_dummy_layer
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_early_initialization_skips_dummy_layers(static):
    ref, got = pair_of("moe-first", static)
    for cache in (ref, got):
        cache.early_initialization(2, HEADS, HEAD_DIM, torch.float32, torch.device("cpu"))
    assert_same(ref, got, "early_initialization")
    step(ref, got, 2, 0, "after early_initialization")


@needs_dummy_layer
def test_ddp_cache_data_with_dummy_entries():
    cfg = CONFIGS["moe-first"]()
    data = [(None, None) if t in ("moe", "mlp", "dummy") else (tokens(2, i), tokens(2, -i))
            for i, t in enumerate(cfg.layer_types)]
    ref, got = transformers.DynamicCache(data, config=cfg), kvt.DynamicCache(data, config=cfg)
    assert_same(ref, got, "ddp_cache_data")


@pytest.mark.skipif(HAS_DUMMY_LAYER, reason=f"SKIPPED: transformers {VERSION} has DummyLayer; what releases "
                                            "without it do is checked where one is installed (5.0, 5.17)")
def test_without_dummy_layer_only_the_dummy_class_is_missing():
    with pytest.raises(ImportError, match=r"DummyLayer.*5\.23"):
        from kvcache.transformers import KvcacheDummyLayer  # noqa: F401
    with pytest.raises(NotImplementedError, match=r"'dummy'.*DummyLayer.*5\.23"):
        kvt.DynamicCache(config=config(["full_attention", "dummy"]))
    assert kvt.DynamicCache(config=config(["full_attention"])).is_dummy == [False]


@pytest.mark.skipif(HAS_DUMMY_LAYER or not HAS_LINEAR_LAYERS,
                    reason=f"SKIPPED: transformers {VERSION} does not give 'moe'/'mlp' blocks a LinearAttentionLayer "
                           "(5.14 to 5.22 do: before, the drop-in has no linear layers; from 5.23 they are dummy)")
def test_moe_and_mlp_blocks_are_empty_linear_layers_before_5_23():
    cfg = config(["linear_attention", "moe", "full_attention", "mlp"])
    ref, got = transformers.DynamicCache(config=cfg), kvt.DynamicCache(config=cfg)
    assert [type(layer).__name__ for layer in ref.layers] == \
        ["LinearAttentionLayer", "LinearAttentionLayer", "DynamicLayer", "LinearAttentionLayer"]
    # the drop-in's layers have transformers' class names, and are instances of transformers' classes
    assert [type(layer).__name__ for layer in got.layers] == [type(layer).__name__ for layer in ref.layers]
    assert all(isinstance(g, type(r)) for r, g in zip(ref.layers, got.layers))
    assert_same(ref, got, "fresh")
    for cache in (ref, got):
        cache.update(tokens(3, 0), tokens(3, 0), 2)
    assert_same(ref, got, "after an update of the attention layer")

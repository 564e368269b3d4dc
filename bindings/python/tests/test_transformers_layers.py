"""The drop-in's layer classes (kvcache/_transformers_layers.py) against transformers' own, under the installed
release: every class is an instance of transformers' namesake, is made with transformers' arguments (and refuses
what transformers refuses), and gives transformers' results on the same inputs; Cache(layers=...) and
Cache(layer_class_to_replicate=...) compose them; the layers of every drop-in cache are instances of transformers'
layer classes; the names transformers 4.x had are checked against the installed release."""
from __future__ import annotations

import copy
import inspect

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers import cache_utils as tcu  # noqa: E402

import kvcache.transformers as kvt  # noqa: E402
from kvcache import _transformers_layers  # noqa: E402
from transformers_release import HAS_DUMMY_LAYER, HAS_LINEAR_LAYERS, LINEAR_SKIP_REASON, VERSION  # noqa: E402

LAYER_NAMES = list(_transformers_layers.__all__)
# kvcache's names for transformers' classes that have none of their own: the transformers class each subclasses
NAMESAKE = {"DynamicChunkedLayer": "DynamicSlidingWindowLayer", "StaticChunkedLayer": "StaticSlidingWindowLayer",
            "SlidingWindowLayer": "StaticSlidingWindowLayer", "ChunkedSlidingLayer": "StaticSlidingWindowLayer"}


def transformers_class(name):
    return getattr(tcu, NAMESAKE.get(name, name))


def needs(*names):
    missing = [n for n in names if n not in kvt.__all__]
    if missing and all(n.startswith("LinearAttention") for n in missing):
        return pytest.mark.skipif(True, reason=LINEAR_SKIP_REASON)
    return pytest.mark.skipif(bool(missing), reason=f"SKIPPED: transformers {VERSION} has no {', '.join(missing)}")


# ------------------------------------------------------------------ classes

@pytest.mark.parametrize("name", LAYER_NAMES)
def test_layer_class_is_a_subclass_of_transformers_class(name):
    cls = getattr(kvt, name)
    assert issubclass(cls, transformers_class(name))
    # never registered as the class transformers' own caches build for a layer type (5.14 on)
    for mapping in ("STATIC_LAYER_TYPE_MAPPING", "DYNAMIC_LAYER_TYPE_MAPPING"):
        assert cls not in getattr(tcu, mapping, {}).values()
    assert cls._layer_type is None


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_transformers_methods_are_kvcache_ones(name):
    """No method or property of transformers' layer classes is reached past kvcache's: they would work on torch
    state that kvcache keeps in C. DummyLayer's do nothing (it holds nothing) and are transformers' own."""
    cls = getattr(kvt, name)
    leaks = set()
    for base in cls.__mro__:
        if base.__module__ != tcu.__name__ or base.__name__ == "DummyLayer":
            continue
        for attr, value in vars(base).items():
            if attr.startswith("__") or not (callable(value) or isinstance(value, property)):
                continue
            owner = next(c for c in cls.__mro__ if attr in vars(c))
            if not owner.__module__.startswith("kvcache"):
                leaks.add(f"{attr} from {owner.__name__}")
    assert not leaks


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_signature_is_transformers(name):
    ours = inspect.signature(getattr(kvt, name))
    theirs = inspect.signature(transformers_class(name).__init__)
    assert list(ours.parameters.values()) == list(theirs.parameters.values())[1:]


# One way to make each class, as in transformers, and the tensors to update it with: (args, kwargs, head_dim)
MAKE = {
    "DynamicLayer": ((), {}), "DynamicSlidingWindowLayer": ((4,), {}), "DynamicChunkedLayer": ((4,), {}),
    "StaticLayer": ((8,), {}), "StaticSlidingWindowLayer": ((8, 4), {}), "StaticChunkedLayer": ((8, 4), {}),
    "SlidingWindowLayer": ((8, 4), {}), "ChunkedSlidingLayer": ((8, 4), {}),
    "QuantoQuantizedLayer": ((), dict(nbits=4, q_group_size=16, residual_length=3)),
    "HQQQuantizedLayer": ((), dict(nbits=4, axis_key=1, axis_value=1, q_group_size=16, residual_length=3)),
    "Fp8QuantizedLayer": ((), {}), "DynamicIndexedLayer": ((), {}), "StaticIndexedLayer": ((8,), {}),
    "LinearAttentionLayer": ((), dict(number_of_states=2)), "LinearAttentionAndFullAttentionLayer": ((), {}),
    "LinearAttentionAndSlidingWindowAttentionLayer": ((4,), {}),
    "LinearAttentionAndStaticFullAttentionLayer": ((8,), {}),
    "LinearAttentionAndStaticSlidingWindowAttentionLayer": ((8, 4), {}), "DummyLayer": ((), {}),
}
ATTENTION = [n for n in LAYER_NAMES if n not in ("QuantizedLayer", "LinearAttentionLayer", "DummyLayer")]


def pair(name):
    args, kwargs = MAKE[name]
    return transformers_class(name)(*args, **kwargs), getattr(kvt, name)(*args, **kwargs)


def test_every_class_has_a_construction_here():
    assert set(LAYER_NAMES) - {"QuantizedLayer"} <= set(MAKE)


@pytest.mark.parametrize("name", [n for n in LAYER_NAMES if n != "QuantizedLayer"])
def test_layer_made_as_in_transformers(name):
    ref, got = pair(name)
    assert isinstance(got, transformers_class(name)) and isinstance(got, getattr(kvt, name))
    for attr in ("is_sliding", "is_compileable", "supports_early_init", "is_initialized", "keys", "values",
                 "max_cache_len", "sliding_window", "nbits", "axis_key", "axis_value", "q_group_size",
                 "residual_length"):
        if attr == "is_compileable" and name.startswith("LinearAttention"):
            continue  # transformers' linear layers compile; kvcache's update at graph breaks (documented)
        if hasattr(ref, attr):
            assert getattr(got, attr) == getattr(ref, attr), attr
    if NAMESAKE.get(name, name) in ("StaticSlidingWindowLayer",):
        assert got.max_cache_len == ref.max_cache_len == 4  # min(sliding_window, max_cache_len)
    # what transformers refuses, the drop-in refuses
    positional = [p for p in inspect.signature(type(got)).parameters.values()
                  if p.default is inspect.Parameter.empty and p.kind == p.POSITIONAL_OR_KEYWORD]
    if positional:
        with pytest.raises(TypeError):
            transformers_class(name)()
        with pytest.raises(TypeError, match=rf"{name}\(\): missing a required argument: '{positional[0].name}'"):
            getattr(kvt, name)()
    with pytest.raises(TypeError):
        transformers_class(name)(*MAKE[name][0], 1, 2, 3, 4, 5, 6)
    with pytest.raises(TypeError, match=rf"{name}\(\): too many positional arguments"):
        getattr(kvt, name)(*MAKE[name][0], 1, 2, 3, 4, 5, 6)


def test_quantized_layer_is_abstract_as_in_transformers():
    with pytest.raises(TypeError):
        tcu.QuantizedLayer()
    with pytest.raises(TypeError, match="abstract"):
        kvt.QuantizedLayer()


# ------------------------------------------------------------------ results against transformers' layers

def states(n, start, batch=2, heads=2, head_dim=16):
    g = torch.Generator().manual_seed(1000 + start)
    return (torch.randn(batch, heads, n, head_dim, generator=g), torch.randn(batch, heads, n, head_dim, generator=g))


def mask_sizes(layer, seen, q):
    # 5.0 to 5.2 ask with the step's cache_position tensor, later releases with its length
    params = inspect.signature(type(layer).__mro__[next(i for i, c in enumerate(type(layer).__mro__)
                                                        if c.__module__ == tcu.__name__)].get_mask_sizes).parameters
    arg = torch.arange(seen, seen + q) if "cache_position" in params else q
    return tuple(int(x) for x in layer.get_mask_sizes(arg))


def max_length(layer):
    return layer.get_max_length() if hasattr(tcu.CacheLayerMixin, "get_max_length") else layer.get_max_cache_shape()


def quantized(layer):
    return isinstance(layer, tcu.QuantizedLayer) or type(layer).__name__ == "Fp8QuantizedLayer"


def assert_same_layer(ref, got, when):
    assert got.is_initialized == ref.is_initialized, when
    assert int(got.get_seq_length()) == int(ref.get_seq_length()), when
    assert max_length(got) == max_length(ref), when
    # a quantized layer's keys are transformers' residual, kvcache's whole history (differences #35): its updates'
    # returns are compared instead
    if ref.keys is not None and ref.keys.numel() and not quantized(ref):
        assert torch.equal(got.keys, ref.keys), when
        assert torch.equal(got.values, ref.values), when
    for attr in ("dtype", "device"):  # set at lazy initialization up to 5.23 (5.24 keeps no dtype)
        if getattr(ref, attr, None) is not None:
            assert getattr(got, attr) == getattr(ref, attr), f"{when}: {attr}"


def call(fn):
    """(what fn returns, None) or (None, the type of what it raised)."""
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - the exception's type is what is compared
        return None, type(e)


def same_outcome(r, g):
    # kvcache's exceptions subclass the Python ones transformers raises (differences #15)
    return r is g or (r is not None and g is not None and issubclass(g, r))


def step(ref, got, n, start, seen, when):
    k, v = states(n, start)
    positions = {"cache_position": torch.arange(seen, seen + n)}  # 5.0 to 5.2's static layers write there
    if not quantized(ref):
        assert mask_sizes(got, seen, n) == mask_sizes(ref, seen, n), when
    (r, r_error), (g, g_error) = call(lambda: ref.update(k, v, positions)), call(lambda: got.update(k, v, positions))
    assert same_outcome(r_error, g_error), f"{when}: transformers raised {r_error}, kvcache {g_error}"
    if r_error is None:
        assert torch.equal(g[0], r[0]) and torch.equal(g[1], r[1]), when
        assert_same_layer(ref, got, when)


OPERATIONS = [("reorder_cache", lambda: (torch.tensor([1, 0]),)), ("batch_repeat_interleave", lambda: (2,)),
              ("batch_select_indices", lambda: (torch.tensor([1]),)), ("crop", lambda: (-1,)), ("reset", tuple)]


@pytest.mark.parametrize("name", ATTENTION)
@pytest.mark.parametrize("operation", [op for op, _ in OPERATIONS] + ["steps"])
def test_layer_gives_transformers_results(name, operation):
    """Prefill, decode steps (past the window and the residual), then one layer operation: update's return,
    lengths, mask sizes and stored tensors as transformers' own layer; an operation transformers' layer refuses
    (StaticLayer has no crop, ...) is refused, with the same exception type (or a subclass)."""
    if name.startswith("LinearAttention") and not HAS_LINEAR_LAYERS:
        pytest.skip(LINEAR_SKIP_REASON)
    ref, got = pair(name)
    assert_same_layer(ref, got, "fresh")
    seen = 0
    for n, when in ((3, "prefill"), (1, "decode 1"), (1, "decode 2"), (2, "two tokens")):
        if operation != "steps" and when == "two tokens":
            break
        step(ref, got, n, seen, seen, when)
        seen += n
    if operation == "steps":
        step(ref, got, 6, 100, seen, "past the window (and a static layer's end)")
        return
    args = dict(OPERATIONS)[operation]()
    (_, r), (_, g) = call(lambda: getattr(ref, operation)(*args)), call(lambda: getattr(got, operation)(*args))
    if quantized(ref) and operation != "reorder_cache" and r is not None:
        # transformers' crop/select/repeat act on the residual, which a flush left a 1-D empty tensor, and raise;
        # kvcache's act on the whole history (differences #30)
        assert g is None, f"{operation}: kvcache raised {g}"
        return
    if quantized(ref) and operation == "crop":
        # transformers' length stays the tokens seen; kvcache's is the tokens held (differences #31)
        assert g is None and int(got.get_seq_length()) == int(ref.get_seq_length()) - 1
        return
    if operation == "crop" and r is ValueError and g is not None and issubclass(g, RuntimeError):
        # a sliding layer past its window: 5.0 to 5.13 refuse with ValueError, later releases (and kvcache, on every
        # release) with RuntimeError (docs/transformers-drop-in.md)
        assert_same_layer(ref, got, operation)
        return
    if (operation == "crop" and r is None and isinstance(ref, tcu.StaticSlidingWindowLayer)
            and seen > got.max_cache_len):
        # 5.24 crops a static sliding layer whose window has moved, rewinding counters over evicted tokens;
        # kvcache refuses and changes nothing (differences #61)
        assert g is not None and issubclass(g, RuntimeError) and got.get_seq_length() == seen
        return
    assert same_outcome(r, g), f"{operation}: transformers raised {r}, kvcache {g}"
    if operation == "reset" and not isinstance(ref, tcu.StaticLayer):
        # a reset dynamic layer: up to 5.17 zero-filled at its length, from 5.23 uninitialized; kvcache's is
        # empty and stays initialized (differences #1)
        assert not ref.is_initialized or not ref.keys.any()
        assert got.get_seq_length() == 0 and got.keys.shape[-2] == 0
        return
    assert_same_layer(ref, got, operation)


@pytest.mark.parametrize("name", [n for n in ATTENTION if "Static" not in n and "Quantized" not in n
                                  and not n.startswith("LinearAttention")])
def test_deepcopy_of_a_layer_is_a_layer_of_a_copy(name):
    _, got = pair(name)
    got.update(*states(3, 0))
    twin = copy.deepcopy(got)
    assert type(twin) is type(got) and twin._cache is not got._cache and twin._cache.layers == [twin]
    twin.update(*states(1, 5))
    assert got.get_seq_length() == 3 and twin.get_seq_length() == 4


@needs("LinearAttentionLayer")
def test_linear_layer_states_as_transformers():
    ref, got = pair("LinearAttentionLayer")
    g = torch.Generator().manual_seed(7)
    conv, rec = torch.randn(2, 8, 4, generator=g), torch.randn(2, 8, 16, generator=g)
    for state_idx in (0, 1):
        assert torch.equal(got.update_conv_state(conv + state_idx, state_idx=state_idx),
                           ref.update_conv_state(conv + state_idx, state_idx=state_idx))
        assert torch.equal(got.update_recurrent_state(rec - state_idx, state_idx=state_idx),
                           ref.update_recurrent_state(rec - state_idx, state_idx=state_idx))
    assert got.has_previous_state == ref.has_previous_state
    for i in (0, 1):
        assert torch.equal(got.conv_states[i], ref.conv_states[i])
        assert torch.equal(got.recurrent_states[i], ref.recurrent_states[i])


@needs("DynamicIndexedLayer", "StaticIndexedLayer")
@pytest.mark.parametrize("name", ["DynamicIndexedLayer", "StaticIndexedLayer"])
def test_indexed_layer_indexer_as_transformers(name):
    ref, got = pair(name)
    g = torch.Generator().manual_seed(3)
    step(ref, got, 3, 0, 0, "prefill")
    for n in (3, 1):
        ik = torch.randn(2, n, 8, generator=g)
        assert torch.equal(got.update_indexer(ik), ref.update_indexer(ik))
        assert torch.equal(got.indexer_keys, ref.indexer_keys)


@needs("DummyLayer")
def test_dummy_layer_as_transformers():
    ref, got = pair("DummyLayer")
    assert got.update(None, None) == ref.update(None, None) == (None, None)
    k, v = states(1, 0)
    for layer in (ref, got):
        with pytest.raises(NotImplementedError, match="Dummy layer"):
            layer.update(k, v)
    assert got.keys is None and got.values is None and got.is_initialized
    assert got.get_max_length() == ref.get_max_length() == -1


# ------------------------------------------------------------------ Cache(layers=...), Cache(layer_class_to_replicate)

def composed():
    made = [("StaticLayer", (8,)), ("DynamicSlidingWindowLayer", (4,)), ("DynamicLayer", ())]
    return (tcu.Cache(layers=[getattr(tcu, n)(*a) for n, a in made]),
            kvt.Cache(layers=[getattr(kvt, n)(*a) for n, a in made]))


def test_cache_of_layers_gives_transformers_results():
    ref, got = composed()
    assert isinstance(got, tcu.Cache) and len(got.layers) == len(ref.layers) == 3
    assert [type(layer).__name__ for layer in got.layers] == [type(layer).__name__ for layer in ref.layers]
    seen = 0
    for n in (3, 1, 1, 2):
        for i in range(3):
            k, v = states(n, 10 * i + seen)
            kw = {"cache_position": torch.arange(seen, seen + n)}
            r, g = ref.update(k, v, i, kw), got.update(k, v, i, kw)
            assert torch.equal(r[0], g[0]) and torch.equal(r[1], g[1])
            assert_same_layer(ref.layers[i], got.layers[i], f"layer {i} after {seen + n}")
        seen += n
    assert [got.get_seq_length(i) for i in range(3)] == [int(ref.get_seq_length(i)) for i in range(3)]
    ref.reorder_cache(torch.tensor([1, 0]))
    got.reorder_cache(torch.tensor([1, 0]))
    for i in range(3):
        assert_same_layer(ref.layers[i], got.layers[i], f"layer {i} reordered")


def test_cache_of_layers_takes_the_layer_objects():
    layers = [kvt.StaticLayer(8), kvt.DynamicLayer()]
    cache = kvt.Cache(layers=layers)
    assert cache.layers[0] is layers[0] and cache.layers[1] is layers[1]
    assert all(layer._cache is cache for layer in layers)
    cache.update(*states(2, 0), 1)
    assert layers[1].get_seq_length() == 2 and cache.get_seq_length(1) == 2
    with pytest.raises(NotImplementedError, match="call crop"):  # one layer of a multi-layer C cache
        layers[1].crop(-1)
    twin = copy.deepcopy(cache)
    assert [type(layer) for layer in twin.layers] == [kvt.StaticLayer, kvt.DynamicLayer]


def test_cache_replicating_dynamic_layers_as_transformers():
    for replicate in (kvt.DynamicLayer, tcu.DynamicLayer):
        ref, got = tcu.Cache(layer_class_to_replicate=tcu.DynamicLayer), kvt.Cache(layer_class_to_replicate=replicate)
        assert len(got.layers) == len(ref.layers) == 0
        for i in (0, 1):
            k, v = states(2, i)
            r, g = ref.update(k, v, i), got.update(k, v, i)
            assert torch.equal(r[0], g[0])
        assert [type(layer) for layer in got.layers] == [kvt.DynamicLayer, kvt.DynamicLayer]
        assert all(isinstance(layer, tcu.DynamicLayer) for layer in got.layers)


def test_cache_refusals_leave_the_layers_as_they_were():
    for kwargs in ({}, {"layers": [kvt.DynamicLayer()], "layer_class_to_replicate": kvt.DynamicLayer}):
        with pytest.raises(ValueError):
            tcu.Cache(**kwargs)
        with pytest.raises(ValueError, match="layer_class_to_replicate"):
            kvt.Cache(**kwargs)
    with pytest.raises(ValueError, match=r"layers=\[\]; a kvcache cache holds at least one layer"):
        kvt.Cache(layers=[])
    with pytest.raises(ValueError, match=r"layer_class_to_replicate=.*StaticLayer.*dynamic layers only"):
        kvt.Cache(layer_class_to_replicate=kvt.StaticLayer)
    with pytest.raises(TypeError, match=r"layers\[1\] is a transformers.cache_utils.StaticLayer"):
        kvt.Cache(layers=[kvt.DynamicLayer(), tcu.StaticLayer(8)])
    owned = kvt.DynamicCache()
    owned.update(*states(1, 0), 0)
    with pytest.raises(ValueError, match=r"layers\[0\] .* a layer of another cache"):
        kvt.Cache(layers=[owned.layers[0]])
    assert owned.layers[0]._cache is owned
    used = kvt.DynamicLayer()
    k, v = states(2, 0)
    used.update(k, v)
    fresh = kvt.StaticLayer(8)
    with pytest.raises(ValueError, match=r"layers\[1\] .* already holds tensors"):
        kvt.Cache(layers=[fresh, used])
    # nothing changed: the layers keep their own C caches, and what they held
    assert used.get_seq_length() == 2 and torch.equal(used.keys, k)
    assert fresh._cache.layers == [fresh] and used._cache.layers == [used]
    fresh.update(k, v)
    assert fresh.get_seq_length() == 2


# ------------------------------------------------------------------ the layers of the drop-in caches

def config(layer_types, **extra):
    return transformers.PretrainedConfig(num_hidden_layers=len(layer_types), layer_types=layer_types,
                                         num_attention_heads=1, num_key_value_heads=1, head_dim=16, hidden_size=16,
                                         **extra)


CONFIG_TYPES = ["full_attention", "sliding_attention", "chunked_attention"]


@pytest.mark.parametrize("static", [False, True], ids=["DynamicCache", "StaticCache"])
def test_cache_layers_are_instances_of_transformers_layers(static):
    cfg = config(CONFIG_TYPES, sliding_window=4, attention_chunk_size=4)
    ref = tcu.StaticCache(cfg, max_cache_len=8) if static else tcu.DynamicCache(config=cfg)
    got = kvt.StaticCache(cfg, max_cache_len=8) if static else kvt.DynamicCache(config=cfg)
    assert isinstance(got, type(ref))
    for r, g in zip(ref.layers, got.layers):
        assert isinstance(g, type(r)), f"{g!r} is no {type(r).__name__}"
    want = (["StaticLayer", "StaticSlidingWindowLayer", "StaticChunkedLayer"] if static
            else ["DynamicLayer", "DynamicSlidingWindowLayer", "DynamicChunkedLayer"])
    assert [type(layer).__name__ for layer in got.layers] == want


@pytest.mark.parametrize("backend,layer", [("quanto", "QuantoQuantizedLayer"), ("hqq", "HQQQuantizedLayer")])
def test_quantized_cache_layers_are_transformers_quantized_layers(backend, layer):
    cfg = config(["full_attention", "full_attention"])
    cache = kvt.QuantizedCache(backend, cfg, nbits=2, q_group_size=16, residual_length=5)
    assert isinstance(cache, tcu.QuantizedCache)
    for got in cache.layers:
        assert type(got) is getattr(kvt, layer) and isinstance(got, getattr(tcu, layer))
        assert (got.nbits, got.q_group_size, got.residual_length) == (2, 16, 5)
    old = getattr(kvt, f"{layer[:-len('Layer')]}Cache")(cfg, nbits=2, q_group_size=16, residual_length=5)
    assert isinstance(old, tcu.QuantizedCache) and old.backend == backend
    assert [type(x) for x in old.layers] == [type(x) for x in cache.layers]
    assert copy.deepcopy(old).layers[0].nbits == 2


@needs("Fp8QuantizedLayer")
def test_fp8_cache_layers_are_fp8_layers():
    cache = kvt.QuantizedCache("fp8", config(["full_attention"]))
    assert type(cache.layers[0]) is kvt.Fp8QuantizedLayer and isinstance(cache.layers[0], tcu.Fp8QuantizedLayer)


@pytest.mark.skipif(not HAS_LINEAR_LAYERS, reason=LINEAR_SKIP_REASON)
@pytest.mark.parametrize("static", [False, True], ids=["DynamicCache", "StaticCache"])
def test_linear_cache_layers_are_transformers_linear_layers(static):
    cfg = config(["linear_attention", "hybrid", "hybrid_sliding", "full_attention"], sliding_window=4)
    ref = tcu.StaticCache(cfg, max_cache_len=8) if static else tcu.DynamicCache(config=cfg)
    got = kvt.StaticCache(cfg, max_cache_len=8) if static else kvt.DynamicCache(config=cfg)
    assert [type(layer).__name__ for layer in got.layers] == [type(layer).__name__ for layer in ref.layers]
    assert all(isinstance(g, type(r)) for r, g in zip(ref.layers, got.layers))


# ------------------------------------------------------------------ transformers 4.x's names

REMOVED_IN_5_0 = ["QuantoQuantizedCache", "HQQQuantizedCache", "OffloadedHybridCache", "HybridCache",
                  "HybridChunkedCache", "OffloadedCache", "OffloadedStaticCache", "SlidingWindowLayer",
                  "ChunkedSlidingLayer", "SlidingWindowCache"]


@pytest.mark.parametrize("name", REMOVED_IN_5_0)
def test_old_name_states_its_removal_and_is_an_instance_of_the_current_class(name):
    cls = getattr(kvt, name)
    assert "removed in transformers 5.0" in " ".join(cls.__doc__.split()).lower(), cls.__doc__
    if name == "SlidingWindowCache":  # later 5.x releases have the name again, as an alias of StaticCache
        assert getattr(tcu, name, tcu.StaticCache) is tcu.StaticCache
    else:
        assert not hasattr(tcu, name), f"transformers {VERSION} has {name}: the docstring is wrong"
    cfg = config(["full_attention", "sliding_attention"], sliding_window=4)
    if name.endswith("Layer"):
        obj, current = cls(8, 4), tcu.StaticSlidingWindowLayer
    elif name.endswith("QuantizedCache"):
        obj, current = cls(config(["full_attention"])), tcu.QuantizedCache
    elif name == "OffloadedCache":
        obj, current = cls(), tcu.DynamicCache
    else:
        obj, current = cls(cfg, 8), tcu.StaticCache
    assert isinstance(obj, current)


@pytest.mark.parametrize("name", ["SlidingWindowLayer", "ChunkedSlidingLayer"])
def test_old_layer_names_give_static_sliding_results(name):
    ref, got = tcu.StaticSlidingWindowLayer(8, 4), getattr(kvt, name)(8, 4)
    seen = 0
    for n in (3, 1, 1, 2):
        step(ref, got, n, seen, seen, f"{seen} + {n}")
        seen += n


def test_layer_classes_missing_from_the_release_say_which_release_has_them():
    for name, (need, since) in kvt._UNAVAILABLE.items():
        with pytest.raises(ImportError, match=rf"{name} needs .*transformers {VERSION} lacks.*{since}"):
            getattr(kvt, name)
        assert name not in kvt.__all__
    if not HAS_DUMMY_LAYER:
        assert "DummyLayer" in kvt._UNAVAILABLE


LIBRARY_CONFIGS = {
    "attention": (["full_attention", "sliding_attention", "chunked_attention"], True),
    "linear": (["linear_attention", "hybrid", "hybrid_sliding", "full_attention"], HAS_LINEAR_LAYERS),
    "dummy": (["full_attention", "moe", "sliding_attention"], HAS_DUMMY_LAYER),  # "moe" blocks: DummyLayer
}


@pytest.mark.parametrize("static", [False, True], ids=["DynamicCache", "StaticCache"])
@pytest.mark.parametrize("name", list(LIBRARY_CONFIGS))
def test_transformers_own_isinstance_code_reads_the_drop_in_layers_right(name, static):
    """transformers' Cache properties that classify layers by isinstance (is_linear: LinearAttentionCacheLayerMixin
    but not LinearAttentionAndFullAttentionLayer; is_dummy: DummyLayer; is_sliding), run as transformers' own code
    over the drop-in's layers, answer as over transformers' layers."""
    layer_types, available = LIBRARY_CONFIGS[name]
    if not available:
        pytest.skip(LINEAR_SKIP_REASON if name == "linear"
                    else f"SKIPPED: transformers {VERSION} has no layers of the types {layer_types}")
    cfg = config(layer_types, sliding_window=4, attention_chunk_size=4)
    ref = tcu.StaticCache(cfg, max_cache_len=8) if static else tcu.DynamicCache(config=cfg)
    got = kvt.StaticCache(cfg, max_cache_len=8) if static else kvt.DynamicCache(config=cfg)
    checked = 0
    for prop in ("is_linear", "is_dummy", "is_sliding"):
        own = getattr(tcu.Cache, prop, None)
        if isinstance(own, property):
            assert own.fget(got) == own.fget(ref), prop
            checked += 1
    assert checked >= 1

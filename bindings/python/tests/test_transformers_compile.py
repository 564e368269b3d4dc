"""torch.compile of the drop-in StaticCache (kvcache/_torch_compile.py): its STATIC layers' update is a custom op
over the stable views of the C buffers, so a compiled step (update, then attention over the returned tensors)
compiles without graph breaks and gives eager's results, and generate with a compiled forward gives the tokens of
transformers' own StaticCache compiled. On the CPU: the CUDA-graph variant (mode="reduce-overhead") runs where
torch sees a GPU."""
from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import torch._dynamo.testing  # noqa: E402

import kvcache.transformers as kvt  # noqa: E402
import tiny_models  # noqa: E402
from kvcache import _torch_compile  # noqa: E402
from transformers_release import DUMMY_LAYER_HAS_NO_LENGTH, VERSION, generate_cache_kwarg  # noqa: E402

pytestmark = pytest.mark.skipif(not _torch_compile.SUPPORTED,
                                reason=f"SKIPPED: torch {torch.__version__} has no torch.library.custom_op or "
                                       "torch.compiler.substitute_in_graph (2.5 on): the drop-in does not compile")

torch.set_num_threads(1)
LAYERS, HEADS, HEAD_DIM, MAX_LEN = 2, 2, 8, 16


def config(**extra):
    return transformers.LlamaConfig(num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                                    hidden_size=HEADS * HEAD_DIM, **extra)


def step(cache, k, v, q):
    """One decode step of a model's attention, as a compiled forward does it."""
    out = []
    for i in range(LAYERS):
        keys, values = cache.update(k + i, v - i, i)
        out.append(torch.nn.functional.scaled_dot_product_attention(q, keys, values))
    return out, cache.get_seq_length(), cache.get_query_offset(1), cache.get_mask_sizes(1, 1)


def inputs(seed, steps, batch=1):
    gen = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(batch, HEADS, 1, HEAD_DIM, generator=gen) for _ in range(3)) for _ in range(steps)]


def prefilled(batch=1, cls=kvt.StaticCache, **kw):
    cache = cls(config(**kw), MAX_LEN)
    x = torch.arange(batch * HEADS * 3 * HEAD_DIM, dtype=torch.float32).reshape(batch, HEADS, 3, HEAD_DIM) / 50
    for i in range(LAYERS):
        cache.update(x, -x, i)  # eager: allocates the buffers (a prefill)
    return cache


def assert_same_steps(eager_cache, compiled_cache, fn, steps):
    for k, v, q in steps:
        (want, length, offset, sizes) = step(eager_cache, k, v, q)
        (got, c_length, c_offset, c_sizes) = fn(compiled_cache, k, v, q)
        assert all(torch.equal(a, b) for a, b in zip(want, got))
        assert (int(c_length), int(c_offset), tuple(c_sizes)) == (length, offset, tuple(sizes))
    for a, b in zip(eager_cache.layers, compiled_cache.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    assert compiled_cache.get_seq_length() == eager_cache.get_seq_length()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_compiled_step_gives_eager_results_without_graph_breaks(backend):
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
    compiled = torch.compile(step, fullgraph=True, backend=counter)  # fullgraph: no C call left in the graph
    assert_same_steps(prefilled(), prefilled(), compiled, inputs(1, 3))
    assert counter.frame_count == 1
    # Another cache of the same shapes runs the same compiled code (its tensors and token are read at each call).
    assert_same_steps(prefilled(), prefilled(), compiled, inputs(2, 2))
    assert counter.frame_count == 1


def test_compiled_steps_follow_reorders_and_copies():
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    eager, cache = prefilled(batch=2), prefilled(batch=2)
    assert_same_steps(eager, cache, compiled, inputs(3, 1, batch=2))
    for c in (eager, cache):
        c.reorder_cache(torch.tensor([1, 0]))  # in place
    assert_same_steps(eager, cache, compiled, inputs(4, 1, batch=2))
    for c in (eager, cache):
        c.reorder_cache(torch.tensor([0, 0, 1]))  # to another batch size: new buffers
    assert_same_steps(eager, cache, compiled, inputs(5, 1, batch=3))
    eager_copy, copied = copy.deepcopy(eager), copy.deepcopy(cache)
    assert_same_steps(eager_copy, copied, compiled, inputs(6, 1, batch=3))
    for c in (eager, cache):
        c.reset()
    assert_same_steps(eager, cache, compiled, inputs(7, 2, batch=3))


def test_early_initialization_publishes_the_buffers():
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    caches = [kvt.StaticCache(config(), MAX_LEN) for _ in range(2)]
    for c in caches:
        c.early_initialization(1, HEADS, HEAD_DIM, torch.float32, torch.device("cpu"))
    assert_same_steps(*caches, compiled, inputs(8, 3))


def test_layer_zero_without_keys_answers_for_the_first_attention_layer():
    """A block without attention first (a DummyLayer from 5.23, an empty linear layer before): get_seq_length()
    in compiled code is the first attention layer's, as the C cache answers eagerly."""
    cfg = config()
    cfg.layer_types = ["moe", "full_attention"]
    try:
        caches = [kvt.StaticCache(cfg, MAX_LEN) for _ in range(2)]
    except NotImplementedError as e:
        pytest.skip(f"SKIPPED: {e}")

    def attention_step(cache, k, v, q):
        keys, values = cache.update(k, v, 1)
        return (torch.nn.functional.scaled_dot_product_attention(q, keys, values), cache.get_seq_length(),
                cache.get_mask_sizes(1, 1))

    if DUMMY_LAYER_HAS_NO_LENGTH:  # transformers asks the DummyLayer itself, which has no length
        for c in caches:
            with pytest.raises(AttributeError, match="'DummyLayer' object has no attribute 'get_seq_length'"):
                c.get_seq_length()
        pytest.skip(f"SKIPPED: transformers {VERSION}'s get_seq_length() raises for a DummyLayer first (checked "
                    "above): no first attention layer to answer for")
    compiled = torch.compile(attention_step, fullgraph=True, backend="aot_eager")
    for c in caches:
        c.update(torch.ones(1, HEADS, 2, HEAD_DIM), torch.ones(1, HEADS, 2, HEAD_DIM), 1)
    for k, v, q in inputs(13, 2):
        want, got = attention_step(caches[0], k, v, q), compiled(caches[1], k, v, q)
        assert torch.equal(want[0], got[0]) and (want[1], want[2]) == (int(got[1]), tuple(got[2]))


@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace")  # the C calls it breaks the graph at
def test_other_layers_run_their_c_calls_at_graph_breaks():
    """A DynamicCache, a static sliding layer, a static layer before its buffers exist: compiled code calls C
    eagerly (a graph break), with eager's results; fullgraph=True refuses them."""
    compiled = torch.compile(step, backend="aot_eager")
    assert_same_steps(prefilled(cls=lambda c, n: kvt.DynamicCache(config=c)),
                      prefilled(cls=lambda c, n: kvt.DynamicCache(config=c)), compiled, inputs(9, 2))
    sliding = dict(layer_types=["sliding_attention", "full_attention"], sliding_window=4)
    assert_same_steps(prefilled(**sliding), prefilled(**sliding), compiled, inputs(10, 3))
    fresh = [kvt.StaticCache(config(), MAX_LEN) for _ in range(2)]
    assert_same_steps(*fresh, compiled, inputs(11, 2))

    def another_step(*args):  # (a code object of its own: dynamo remembers how it compiled step)
        return step(*args)

    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(another_step, fullgraph=True, backend="aot_eager")(prefilled(**sliding), *inputs(12, 1)[0])


def _generate(model, cache, compile_config=None):
    kw = dict(max_new_tokens=10, do_sample=False)
    if compile_config is not None:
        kw["compile_config"] = compile_config
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(torch.tensor([[5, 17, 33, 2, 61, 8, 44, 12]], device=model.device),
                              **{generate_cache_kwarg(model): cache}, **kw)


def _compile_config(**kw):
    compile_config = transformers.CompileConfig(fullgraph=True, **kw)
    compile_config._compile_all_devices = True  # generate compiles on accelerators only, unless told
    return compile_config


@pytest.mark.skipif(not hasattr(transformers.CompileConfig, "_compile_all_devices"),
                    reason=f"SKIPPED: transformers {VERSION} cannot be told to compile generate's forward on the CPU")
def test_generate_with_a_compiled_forward_gives_transformers_tokens():
    model = tiny_models.llama()
    compile_config = _compile_config(backend="inductor")
    plain = _generate(model, transformers.StaticCache(config=model.config, max_cache_len=32))
    ref = _generate(model, transformers.StaticCache(config=model.config, max_cache_len=32), compile_config)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    got = _generate(model, kvt.StaticCache(model.config, 32), compile_config)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs + 1, "one graph for the drop-in's cache"
    again = _generate(model, kvt.StaticCache(model.config, 32), compile_config)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs + 1, "a new cache must not recompile"
    assert torch.equal(ref, plain) and torch.equal(got, ref) and torch.equal(again, ref), f"\n{ref}\n{got}\n{again}"


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="SKIPPED: no CUDA device here; the CUDA-graph variant (mode='reduce-overhead', bfloat16) "
                           "runs where torch sees a GPU")
def test_generate_with_cuda_graphs_gives_transformers_tokens():
    """mode='reduce-overhead': inductor leaves the two cudagraph_unsafe ops out of its CUDA graphs."""
    model = tiny_models.llama().to("cuda", torch.bfloat16)
    compile_config = _compile_config(mode="reduce-overhead")
    ref = _generate(model, transformers.StaticCache(config=model.config, max_cache_len=32), compile_config)
    for _ in range(2):  # the second one replays the recorded graphs
        got = _generate(model, kvt.StaticCache(model.config, 32), compile_config)
        assert torch.equal(got, ref), f"\n{ref}\n{got}"

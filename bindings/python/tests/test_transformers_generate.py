"""End to end: real transformers models (small configs, random weights, fixed seeds, no download) generate
exactly the same tokens with kvcache's drop-in caches as with transformers' own cache classes."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import kvcache.transformers as kvt  # noqa: E402
import tiny_models  # noqa: E402
from transformers_release import max_length  # noqa: E402

torch.set_num_threads(1)
MODELS = {name: tiny_models.BUILDERS[name] for name in ("llama", "mistral", "gemma2", "gpt2")}
_cache_models = {}


def get(name):
    if name not in _cache_models:
        _cache_models[name] = tiny_models.BUILDERS[name]()
    return _cache_models[name]


PROMPT = torch.tensor([[5, 17, 33, 2, 61, 8, 44, 12]])
BATCH = torch.tensor([[0, 0, 0, 9, 18, 27, 36, 45], [7, 14, 21, 28, 35, 42, 49, 56]])
BATCH_MASK = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [1] * 8])


def generate(model, cache, seed=0, **kwargs):
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(past_key_values=cache, return_dict_in_generate=True, output_scores=True, **kwargs)
    return out


def assert_same(ref, got, cache=None):
    assert torch.equal(ref.sequences, got.sequences), f"\n{ref.sequences}\n{got.sequences}"
    assert len(set(ref.sequences[0, -10:].tolist())) > 2, "degenerate generation proves little"
    for a, b in zip(ref.scores, got.scores):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def transformers_dynamic(model):
    return transformers.DynamicCache(config=model.config)


MODES = {
    "greedy": dict(max_new_tokens=12, do_sample=False),
    "sample": dict(max_new_tokens=12, do_sample=True, top_k=20, temperature=1.3),
    "beam": dict(max_new_tokens=10, do_sample=False, num_beams=3, num_return_sequences=2),
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", list(MODELS))
def test_dynamic_cache_generates_the_same_tokens(name, mode):
    model = get(name)
    kw = dict(MODES[mode], input_ids=PROMPT)
    ref = generate(model, transformers_dynamic(model), **kw)
    cache = kvt.DynamicCache(config=model.config)
    got = generate(model, cache, **kw)
    assert_same(ref, got)
    assert isinstance(got.past_key_values, transformers.DynamicCache)
    assert got.past_key_values is cache
    assert cache.get_seq_length() == ref.past_key_values.get_seq_length()


@pytest.mark.parametrize("name", list(MODELS))
def test_batched_left_padding(name):
    model = get(name)
    kw = dict(input_ids=BATCH, attention_mask=BATCH_MASK, max_new_tokens=10, do_sample=False)
    ref = generate(model, transformers_dynamic(model), **kw)
    got = generate(model, kvt.DynamicCache(config=model.config), **kw)
    assert_same(ref, got)


def test_lazy_dynamic_cache_llama():
    model = get("llama")
    kw = dict(input_ids=PROMPT, max_new_tokens=12, do_sample=False)
    ref = generate(model, transformers.DynamicCache(), **kw)
    got = generate(model, kvt.DynamicCache(), **kw)
    assert_same(ref, got)


@pytest.mark.parametrize("mode", ["greedy", "sample", "beam"])
@pytest.mark.parametrize("name", ["llama", "mistral", "gemma2"])
def test_static_cache_generates_the_same_tokens(name, mode):
    model = get(name)
    kw = dict(MODES[mode], input_ids=PROMPT)
    batch = MODES[mode].get("num_beams", 1)
    ref = generate(model, transformers.StaticCache(config=model.config, max_cache_len=32), **kw)
    cache = kvt.StaticCache(model.config, max_cache_len=32)
    got = generate(model, cache, **kw)
    assert_same(ref, got)
    assert isinstance(cache, transformers.StaticCache) and cache.batch_size == batch
    assert [layer.is_sliding for layer in cache.layers] == [layer.is_sliding for layer in ref.past_key_values.layers]
    assert cache.get_max_length() == max_length(ref.past_key_values)


@pytest.mark.parametrize("cls", [kvt.SlidingWindowCache, kvt.HybridCache, kvt.HybridChunkedCache])
def test_static_aliases(cls):
    model = get("gemma2")
    kw = dict(input_ids=PROMPT, max_new_tokens=12, do_sample=False)
    ref = generate(model, transformers.StaticCache(config=model.config, max_cache_len=32), **kw)
    assert_same(ref, generate(model, cls(model.config, max_cache_len=32), **kw))


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_offloaded_caches_generate_the_same_tokens(name):
    model = get(name)
    kw = dict(input_ids=PROMPT, max_new_tokens=12, do_sample=False)
    ref = generate(model, transformers_dynamic(model), **kw)
    cache = kvt.OffloadedCache(config=model.config)
    assert_same(ref, generate(model, cache, **kw))
    mem = cache.kvcache.memory()
    assert mem.bytes_host > 0  # layers rest in the host tier between updates
    ref_s = generate(model, transformers.StaticCache(config=model.config, max_cache_len=32), **kw)
    assert_same(ref_s, generate(model, kvt.OffloadedStaticCache(model.config, max_cache_len=32), **kw))


@pytest.mark.parametrize("backend,axis", [("quanto", 0), ("hqq", 1)])
def test_quantized_cache_generates_the_same_tokens(backend, axis):
    if backend == "quanto":
        pytest.importorskip("optimum.quanto", reason="SKIPPED: transformers' quanto reference needs optimum-quanto")
    else:
        pytest.importorskip("hqq", reason="SKIPPED: transformers' HQQ reference needs hqq")
    model = get("llama")
    q = dict(nbits=4, axis_key=axis, axis_value=axis, q_group_size=8, residual_length=4)
    kw = dict(input_ids=PROMPT, max_new_tokens=14, do_sample=False)
    ref = generate(model, transformers.QuantizedCache(backend, model.config, **q), **kw)
    cache = kvt.QuantizedCache(backend, model.config, **q)
    got = generate(model, cache, **kw)
    assert isinstance(cache, transformers.QuantizedCache)
    assert_same(ref, got)
    assert cache.kvcache.memory().bytes_quantized > 0


@pytest.mark.parametrize("mode", ["greedy", "sample", "beam"])
def test_encoder_decoder_t5(mode):
    model = get("t5")
    enc = torch.tensor([[4, 9, 16, 25, 36, 49, 64, 81, 3]])
    # a random tiny T5 soon repeats one token; forbidding repeated bigrams keeps the comparison meaningful
    kw = dict(MODES[mode], input_ids=enc, no_repeat_ngram_size=2)
    ref_cache = transformers.EncoderDecoderCache(transformers.DynamicCache(config=model.config),
                                                 transformers.DynamicCache(config=model.config))
    ref = generate(model, ref_cache, **kw)
    cache = kvt.EncoderDecoderCache(config=model.config)
    got = generate(model, cache, **kw)
    assert_same(ref, got)
    assert isinstance(cache, transformers.EncoderDecoderCache)
    assert all(cache.is_updated.values())
    assert cache.cross_attention_cache.get_seq_length() == enc.shape[1]


def test_deepcopy_for_prefix_reuse():
    """transformers' test_cache_copy on a tiny model: a prefilled cache is deep-copied and reused twice."""
    model = get("llama")
    prefix = PROMPT[:, :5]
    cache = kvt.DynamicCache(config=model.config)
    with torch.no_grad():
        model(prefix, past_key_values=cache, use_cache=True)
    outs = []
    for tail in ([[7, 7, 3]], [[50, 60, 70]]):
        ids = torch.cat([prefix, torch.tensor(tail)], dim=1)
        reused = copy.deepcopy(cache)
        assert reused.kvcache._handle is not cache.kvcache._handle
        got = model.generate(ids, past_key_values=reused, max_new_tokens=8, do_sample=False)
        ref = model.generate(ids, max_new_tokens=8, do_sample=False)
        assert torch.equal(got, ref)
        outs.append(got)
    assert cache.get_seq_length() == 5  # the original is untouched
    assert not torch.equal(outs[0], outs[1])


def test_layers_expose_zero_copy_torch_views():
    model = get("gemma2")
    cache = kvt.DynamicCache(config=model.config)
    generate(model, cache, input_ids=PROMPT, max_new_tokens=3, do_sample=False)
    full = cache.layers[1]
    assert full.keys.shape == (1, 2, PROMPT.shape[1] + 2, 8)
    assert full.keys.data_ptr() == full.keys.data_ptr()  # same memory every time: a view, not a copy
    assert cache.layers[0].keys.shape[2] == 3  # the sliding layer keeps window - 1
    assert cache.is_sliding == [True, False]
    assert "kvcache.transformers.DynamicCache" in repr(cache)
    assert len(cache) == 2 and len(list(cache)) == 2


@pytest.mark.parametrize("name", ["llama", "gpt2", "mistral"])
def test_contrastive_style_repeat_and_select(name):
    """Contrastive search (on the Hub since transformers 4.56) repeats the cache per candidate with
    batch_repeat_interleave and keeps the chosen rows with batch_select_indices; after both, decoding goes on
    exactly as with transformers' DynamicCache."""
    model = get(name)
    caches = [transformers_dynamic(model), kvt.DynamicCache(config=model.config)]
    logits = []
    for cache in caches:
        steps = []
        with torch.no_grad():
            out = model(BATCH, attention_mask=BATCH_MASK, past_key_values=cache)
            steps.append(out.logits[:, -1])
            cache.batch_repeat_interleave(3)
            cand = torch.tensor([[3], [4], [5], [6], [7], [8]])
            mask = torch.cat([BATCH_MASK.repeat_interleave(3, 0), torch.ones(6, 1, dtype=torch.long)], 1)
            out = model(cand, attention_mask=mask, past_key_values=cache)
            steps.append(out.logits[:, -1])
            keep = torch.tensor([1, 4])
            cache.batch_select_indices(keep)
            mask = torch.cat([mask[keep], torch.ones(2, 1, dtype=torch.long)], 1)
            out = model(torch.tensor([[9], [10]]), attention_mask=mask, past_key_values=cache)
            steps.append(out.logits[:, -1])
        logits.append(steps)
        assert cache.get_seq_length() == BATCH.shape[1] + 2
    for a, b in zip(*logits):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        assert torch.equal(a.argmax(-1), b.argmax(-1))

"""The generation matrix: a tiny random-weight model of each family with a distinct cache shape (full, sliding,
hybrid sliding, GQA, GPT-2, encoder-decoder text and audio, recurrent, hybrid recurrent, sparse indexed, and the
dummy layers of blocks without attention and of KV sharing) generates the same tokens with kvcache's drop-in caches
as with transformers' own, by greedy search, seeded sampling, beam search and assisted decoding; on the CPU in
float32 and, where a GPU is, on CUDA in bfloat16.

bindings/python/check.sh runs this file under every transformers release of the test environment
(scripts/transformers-releases.txt); what a release lacks is skipped with the reason (transformers_release.py)."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import kvcache.transformers as kvt  # noqa: E402
import tiny_models  # noqa: E402
from transformers_release import (HAS_GENERATE_CACHE_KWARG, HAS_LINEAR_LAYERS, LINEAR_SKIP_REASON, VERSION,  # noqa: E402
                                  generate_cache_kwarg, returned_cache)

torch.set_num_threads(1)
PROMPT = [5, 17, 33, 2, 61, 8, 44, 12]
ENCODER_IDS = [4, 9, 16, 25, 36, 49, 64, 81, 3]
MODES = {
    "greedy": dict(max_new_tokens=10, do_sample=False),
    "sample": dict(max_new_tokens=10, do_sample=True, top_k=20, temperature=1.3),
    "beam": dict(max_new_tokens=8, do_sample=False, num_beams=3, num_return_sequences=2),
    "assisted": dict(max_new_tokens=10, do_sample=False),
}
DEVICES = {"cpu": torch.float32, "cuda": torch.bfloat16}
_built = {}


def model_for(name, device, seed=0):
    key = (name, device, seed)
    if key not in _built:
        if name in tiny_models.RECURRENT and not HAS_LINEAR_LAYERS:
            pytest.skip(f"{LINEAR_SKIP_REASON} ({name})")
        _built[key] = tiny_models.BUILDERS[name](seed).to(device, DEVICES[device])
    return _built[key]


def inputs_for(name, model):
    device = model.device
    if name == "whisper":
        gen = torch.Generator().manual_seed(3)
        frames = 2 * model.config.max_source_positions
        features = torch.randn(1, model.config.num_mel_bins, frames, generator=gen)
        # a random tiny decoder soon repeats one token; forbidding repeated bigrams keeps the comparison meaningful
        return dict(input_features=features.to(device, model.dtype), no_repeat_ngram_size=2)
    if name == "t5":
        return dict(input_ids=torch.tensor([ENCODER_IDS], device=device), no_repeat_ngram_size=2)
    if name == "gpt2":  # as Whisper's decoder
        return dict(input_ids=torch.tensor([PROMPT], device=device), no_repeat_ngram_size=2)
    return dict(input_ids=torch.tensor([PROMPT], device=device))


def transformers_cache(name, model):
    """transformers' own cache of the kind the drop-in replaces (passed explicitly: generate's default differs in
    some releases, e.g. a DynamicCache without the config's sliding layers for assisted decoding before 5.14)."""
    if name in tiny_models.ENCODER_DECODER:
        return transformers.EncoderDecoderCache(transformers.DynamicCache(config=model.config),
                                                transformers.DynamicCache(config=model.config))
    return transformers.DynamicCache(config=model.config)


def kvcache_cache(name, model):
    if name in tiny_models.ENCODER_DECODER:
        return kvt.EncoderDecoderCache(config=model.config)
    try:
        return kvt.DynamicCache(config=model.config)
    except NotImplementedError as e:
        if name == "deepseek_v32":  # kvcache names the layer type it lacks; the skip says which
            pytest.skip(f"SKIPPED: {e}")
        raise


def generate(model, seed, cache=None, **kwargs):
    if cache is not None:
        kwargs[generate_cache_kwarg(model)] = cache
    torch.manual_seed(seed)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(return_dict_in_generate=True, **kwargs)


@pytest.fixture(params=list(DEVICES))
def device(request):
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("SKIPPED: no CUDA device here; the bfloat16 CUDA variant runs where torch sees a GPU")
    return request.param


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", list(tiny_models.BUILDERS))
def test_generates_the_same_tokens_as_transformers_caches(name, mode, device):
    model = model_for(name, device)
    kw = dict(MODES[mode], **inputs_for(name, model))
    cache = kvcache_cache(name, model)
    if mode == "assisted":
        return _check_assisted(name, model, cache, kw, device)
    ref = generate(model, 1, transformers_cache(name, model), **kw)
    got = generate(model, 1, cache, **kw)
    assert torch.equal(ref.sequences, got.sequences), f"\n{ref.sequences}\n{got.sequences}"
    assert_used(name, cache, got)
    tail = ref.sequences[0, -8:].tolist()
    assert len(set(tail)) > 2, f"degenerate generation proves little: {tail}"


def _check_assisted(name, model, cache, kw, device):
    """Assisted greedy decoding crops the main model's cache after each rejected draft: its tokens are those of
    transformers' own caches and, being greedy, those of plain greedy search. Some releases cannot crop their own
    caches here (sliding layers past the window before 5.15, record_past on sliding layers in 5.15 to 5.22): there
    the drop-in is held to plain greedy search, and skipped only if it fails as transformers does."""
    assistant = model_for(name, device, seed=5)
    plain = generate(model, 1, **kw)
    try:
        ref = generate(model, 1, transformers_cache(name, model), assistant_model=assistant, **kw)
    except (ValueError, RuntimeError, NotImplementedError) as e:
        ref, ref_error = None, e
    try:
        got = generate(model, 1, cache, assistant_model=assistant, **kw)
    except (ValueError, RuntimeError, NotImplementedError) as e:
        if ref is None:
            pytest.skip(f"SKIPPED: transformers {VERSION} cannot decode {name} with an assistant, with its own caches "
                        f"({type(ref_error).__name__}: {ref_error}) nor with kvcache's ({type(e).__name__}: {e})")
        raise
    if ref is not None:
        assert torch.equal(ref.sequences, got.sequences), f"\n{ref.sequences}\n{got.sequences}"
    # Where transformers' own caches give other tokens with an assistant than without (a model whose verification
    # of a multi-token draft is not exact, e.g. DeepSeek-V3.2's top-k sparse attention over the draft's queries),
    # the drop-in is held to transformers' assisted tokens, checked above; elsewhere also to plain greedy search.
    if ref is None or torch.equal(ref.sequences, plain.sequences):
        assert torch.equal(plain.sequences, got.sequences), f"\n{plain.sequences}\n{got.sequences}"
    assert_used(name, cache, got)


def assert_used(name, cache, out):
    if name in tiny_models.RECURRENT:  # any linear layer (has_previous_state() asks the last one: before 5.23 an
        # empty "moe"/"mlp" block's)
        assert any(cache.has_previous_state(i) for i, linear in enumerate(cache.is_linear) if linear)
    else:
        assert cache.get_seq_length() > 0
    if name != "whisper":  # Whisper's generate returns a new cache of its own, split per batch row
        assert returned_cache(out) is cache


@pytest.mark.parametrize("kwarg", ["cache", "past_key_values"])
def test_generate_takes_the_cache_under_either_name(kwarg):
    """transformers 5.24 renamed generate's past_key_values= to cache= (the old name still works, deprecated)."""
    if kwarg == "cache" and not HAS_GENERATE_CACHE_KWARG:
        pytest.skip(f"SKIPPED: transformers {VERSION}'s generate has no cache= (5.24 on); past_key_values= is its name")
    model = model_for("llama", "cpu")
    kw = dict(MODES["greedy"], **inputs_for("llama", model))
    ref = generate(model, 1, **kw)
    cache = kvt.DynamicCache(config=model.config)
    torch.manual_seed(1)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = model.generate(return_dict_in_generate=True, **kw, **{kwarg: cache})
    assert torch.equal(ref.sequences, got.sequences)
    assert returned_cache(got) is cache
    assert cache.get_seq_length() == ref.sequences.shape[1] - 1

"""kvcache.transformers.QuantizedCache(backend="fp8") against transformers' own QuantizedCache("fp8", config)
(Fp8QuantizedLayer: float8 e4m3fn codes, one float32 scale per tensor fixed by the first update): the first
update returns its inputs, later ones the whole history dequantized, bit-exact."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import kvcache  # noqa: E402
import kvcache.transformers as kvt  # noqa: E402

if not hasattr(transformers.cache_utils, "Fp8QuantizedLayer"):  # pragma: no cover - the test venv has 5.23
    pytest.skip("transformers without the fp8 QuantizedCache backend (>= 5.21)", allow_module_level=True)

HEADS, HEAD_DIM = 2, 8


def config(layer_types=("full_attention", "full_attention")):
    return transformers.LlamaConfig(num_hidden_layers=len(layer_types), layer_types=list(layer_types),
                                    num_attention_heads=HEADS, num_key_value_heads=HEADS, head_dim=HEAD_DIM,
                                    hidden_size=HEADS * HEAD_DIM)


def states(gen, batch, tokens, dtype, amplitude=3.0):
    shape = (batch, HEADS, tokens, HEAD_DIM)
    k = (torch.randn(shape, generator=gen) * amplitude).to(dtype)
    v = (torch.randn(shape, generator=gen) * amplitude).to(dtype)
    return k, v


def same(a, b):
    """Bit-exact: equal dtypes, shapes and values (NaN where the other has NaN)."""
    assert a.dtype == b.dtype and a.shape == b.shape
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_fp8_builds_fp8_layers():
    cache = kvt.QuantizedCache("fp8", config())
    assert cache.backend == "fp8"
    assert len(cache.layers) == 2
    assert all(cache.kvcache.layer_info(i).kind == kvcache.LayerKind.QUANTIZED_FP8 for i in range(2))
    assert isinstance(cache, transformers.QuantizedCache)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_fp8_updates_match_transformers(dtype):
    gen = torch.Generator().manual_seed(8)
    ref = transformers.QuantizedCache("fp8", config())
    ours = kvt.QuantizedCache("fp8", config())
    for step, tokens in enumerate([5, 1, 1, 3, 1]):
        for layer in range(2):
            k, v = states(gen, 2, tokens, dtype, amplitude=3.0 + layer)
            rk, rv = ref.update(k, v, layer)
            ok, ov = ours.update(k.clone(), v.clone(), layer)
            if step == 0:  # the first update returns its inputs as they are
                assert torch.equal(ok, k) and torch.equal(ov, v)
            assert torch.equal(ok, rk), f"keys differ at step {step}, layer {layer}"
            assert torch.equal(ov, rv), f"values differ at step {step}, layer {layer}"
            if step > 0:  # the dequantized history, not the inputs
                assert ok.shape[-2] == ref.get_seq_length(layer)
        assert ours.get_seq_length(0) == ref.get_seq_length(0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_fp8_reorder_cache_matches_transformers(dtype):
    gen = torch.Generator().manual_seed(9)
    ref = transformers.QuantizedCache("fp8", config())
    ours = kvt.QuantizedCache("fp8", config())
    for tokens in (4, 1):
        for layer in range(2):
            k, v = states(gen, 2, tokens, dtype)
            ref.update(k, v, layer)
            ours.update(k, v, layer)
    beam_idx = torch.tensor([1, 0])
    ref.reorder_cache(beam_idx)
    ours.reorder_cache(beam_idx)
    for step in range(2):
        for layer in range(2):
            k, v = states(gen, 2, 1, dtype)
            rk, rv = ref.update(k, v, layer)
            ok, ov = ours.update(k, v, layer)
            assert torch.equal(ok, rk) and torch.equal(ov, rv), f"step {step}, layer {layer}"
    ref.reorder_cache(torch.tensor([1, 1]))
    ours.reorder_cache(torch.tensor([1, 1]))
    k, v = states(gen, 2, 2, dtype)
    for layer in range(2):
        rk, rv = ref.update(k, v, layer)
        ok, ov = ours.update(k, v, layer)
        assert torch.equal(ok, rk) and torch.equal(ov, rv), f"layer {layer}"


def test_fp8_out_of_range_and_zero_first_update_match_transformers():
    """Later tokens beyond the calibrated range and a zero first update (scale clamped to the float32 minimum)."""
    gen = torch.Generator().manual_seed(10)
    ref = transformers.QuantizedCache("fp8", config())
    ours = kvt.QuantizedCache("fp8", config())
    zeros = torch.zeros(1, HEADS, 2, HEAD_DIM)
    for step in range(3):
        for layer in range(2):
            if layer == 1 and step == 0:
                k = v = zeros
            else:
                k, v = states(gen, 1, 2, torch.float32, amplitude=1.0 + 100.0 * step)
            rk, rv = ref.update(k, v, layer)
            ok, ov = ours.update(k, v, layer)
            same(ok, rk)
            same(ov, rv)


@pytest.mark.parametrize("option", ["nbits", "axis_key", "axis_value", "q_group_size", "residual_length"])
def test_fp8_refuses_group_wise_options(option):
    with pytest.raises(ValueError, match="per-tensor"):
        transformers.QuantizedCache("fp8", config(), **{option: 1})
    with pytest.raises(ValueError, match="per-tensor"):
        kvt.QuantizedCache("fp8", config(), **{option: 1})


def test_fp8_refuses_non_full_attention_layers():
    cfg = config(("full_attention", "sliding_attention"))
    cfg.sliding_window = 4
    with pytest.raises(ValueError, match="only full attention"):
        transformers.QuantizedCache("fp8", cfg)
    with pytest.raises(ValueError, match="only full attention"):
        kvt.QuantizedCache("fp8", cfg)


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError):
        kvt.QuantizedCache("fp4", config())

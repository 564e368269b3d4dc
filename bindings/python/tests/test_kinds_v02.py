"""The ABI 0.2 kinds through the Python API: quantized, sink, offloaded and recurrent-state layers."""
from __future__ import annotations

import numpy as np
import pytest

import kvcache
from kvcache import LayerKind, LayerSpec, QuantOptions


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("quantizer,axis,nbits", [("quanto", 0, 4), ("quanto", -1, 2), ("hqq", 1, 4), ("hqq", 0, 8)])
@pytest.mark.parametrize("mode", ["incremental", "transformers"])
def test_quantized_cache(quantizer, axis, nbits, mode):
    cache = kvcache.QuantizedCache(quantizer, num_hidden_layers=1, nbits=nbits, axis_key=axis, axis_value=axis,
                                   q_group_size=16, residual_length=8, mode=mode)
    x = rnd(2, 2, 40, 32)
    keys, _ = cache.update(x, x, 0)
    assert keys.shape == (2, 2, 40, 32)
    for step in range(20):
        tok = rnd(2, 2, 1, 32, seed=step + 1)
        keys, values = cache.update(tok, tok, 0)
        assert keys.shape[2] == 41 + step
        assert np.array_equal(np.from_dlpack(keys)[:, :, -1:], tok)  # the newest token is exact
    info = cache.layer_info(0)
    assert info.kind == LayerKind.QUANTIZED and info.quantized_length > 0 and info.seq_length == 60
    mem = cache.memory()
    if mode == "transformers" and quantizer == "hqq" and axis == 0:
        # documented (core/layer_quantized_transformers.c): HQQ axis-0 groups span batch rows, so with batch 2
        # the history is kept as dequantized values until the next quantization
        assert mem.bytes_quantized == 0
    else:
        assert mem.bytes_quantized > 0
    approx = np.from_dlpack(cache.update(rnd(2, 2, 1, 32), rnd(2, 2, 1, 32), 0).keys)[:, :, :40]
    assert np.abs(approx - x).max() < (2.5 if nbits <= 2 else 1.0)  # dequantized history is close
    cache.reorder_cache([1, 0])
    cache.crop(-2)
    assert cache.get_seq_length() == 59
    dup = cache.clone()
    cache.reset()
    assert cache.get_seq_length() == 0 and dup.get_seq_length() == 59


def test_quantized_layer_in_a_custom_cache():
    cache = kvcache.CustomCache([LayerSpec(LayerKind.QUANTIZED, quant=QuantOptions("hqq", nbits=2, axis_key=1,
                                                                                   axis_value=1, q_group_size=8,
                                                                                   residual_length=4)),
                                 LayerSpec(LayerKind.DYNAMIC)])
    x = rnd(1, 1, 12, 16)
    cache.update_all([x, x], [x, x])
    assert cache.layer_info(0).kind == LayerKind.QUANTIZED and cache.get_seq_length(1) == 12


def test_sink_cache_keeps_sink_and_recent_tokens():
    cache = kvcache.SinkCache(window_length=6, num_sink_tokens=2, num_hidden_layers=1)
    x = np.arange(1 * 1 * 10 * 4, dtype=np.float32).reshape(1, 1, 10, 4)
    cache.update(x[:, :, :4], x[:, :, :4], 0)
    for i in range(4, 10):
        cache.update(x[:, :, i:i + 1], x[:, :, i:i + 1], 0)
    kept = np.from_dlpack(cache.layer_view(0).values)
    assert kept.shape[2] == 6
    assert np.array_equal(kept[:, :, :2], x[:, :, :2])  # the sink tokens
    assert np.array_equal(kept[:, :, 2:], x[:, :, 6:10])  # the most recent ones (values are not rotated)
    info = cache.layer_info(0)
    assert info.kind == LayerKind.SINK and info.num_sink_tokens == 2 and info.window == 6


def test_sink_cache_rerotates_keys_with_rope():
    dim, n = 8, 12
    inv = 1.0 / (10000 ** (np.arange(0, dim, 2) / dim))
    ang = np.outer(np.arange(n), inv)
    cos = np.concatenate([np.cos(ang)] * 2, -1).astype(np.float32)
    sin = np.concatenate([np.sin(ang)] * 2, -1).astype(np.float32)
    cache = kvcache.SinkCache(window_length=4, num_sink_tokens=1, num_hidden_layers=1)
    x = rnd(1, 1, n, dim)
    for i in range(n):
        # [batch, seq, dim]: the cos/sin of this call's positions, as the model computed them
        cache.update(x[:, :, i:i + 1], x[:, :, i:i + 1], 0, {"cos": cos[None, i:i + 1], "sin": sin[None, i:i + 1]})
    keys = np.from_dlpack(cache.layer_view(0).keys)
    assert keys.shape[2] == 4
    assert not np.allclose(keys[:, :, 1:], x[:, :, -3:])  # kept keys were re-rotated to new positions
    assert np.allclose(np.from_dlpack(cache.layer_view(0).values)[:, :, 1:], x[:, :, -3:])


def test_offloaded_cache_and_manual_offload():
    cache = kvcache.OffloadedCache(num_hidden_layers=3)
    x = rnd(1, 2, 5, 8)
    for i in range(3):
        keys, _ = cache.update(x, x, i)
        assert np.array_equal(np.from_dlpack(keys), x)
    assert cache.memory().bytes_host > 0
    assert any(cache.layer_info(i).is_offloaded for i in range(3))
    plain = kvcache.DynamicCache(num_hidden_layers=2)
    plain.update_all([x, x], [x, x])
    plain.offload(1)
    assert plain.layer_info(1).is_offloaded and plain.memory().bytes_host > 0
    plain.prefetch(1)
    assert not plain.layer_info(1).is_offloaded
    assert np.array_equal(np.from_dlpack(plain.layer_view(1).keys), x)
    static = kvcache.OffloadedStaticCache(num_hidden_layers=2, max_cache_len=8)
    static.update(x, x, 0)
    assert static.get_seq_length(0) == 5


def test_mamba_states():
    cache = kvcache.MambaCache(num_hidden_layers=2, conv_kernel=4)
    assert [layer.kind for layer in cache.layers] == [LayerKind.LINEAR] * 2
    assert cache.get_conv_state(0) is None and not cache.has_previous_state(0)
    prefill = rnd(2, 6, 3)
    out = cache.update_conv_state(prefill, 0)
    assert out.shape == (2, 6, 4)  # left-padded to K on the first call
    assert np.array_equal(np.from_dlpack(out)[..., 1:], prefill)
    step = rnd(2, 6, 1, seed=3)
    out = cache.update_conv_state(step, 0)
    assert out.shape == (2, 6, 5)  # stored K columns followed by the new one
    conv = cache.get_conv_state(0)
    assert conv.shape == (2, 6, 4) and np.array_equal(np.from_dlpack(conv)[..., -1:], step)
    ssm = rnd(2, 6, 16)
    view = cache.update_recurrent_state(ssm, 0)
    assert np.array_equal(np.from_dlpack(view), ssm)
    assert cache.get_recurrent_state(0).data_ptr == view.data_ptr
    assert cache.has_previous_state(0) and not cache.has_previous_state(1)
    cache.reorder_cache([1, 0])
    assert np.array_equal(np.from_dlpack(cache.get_recurrent_state(0)), ssm[[1, 0]])
    cache.batch_select_indices([0])
    assert cache.layer_info(0).batch_size == 1
    assert cache.memory().bytes_state > 0
    cache.reset()
    assert not cache.has_previous_state(0)


def test_legacy_mamba_conv_api_with_cache_position():
    cache = kvcache.MambaCache(num_hidden_layers=1, conv_kernel=4)
    x = rnd(1, 3, 4)
    out = cache.update_conv_state(x, 0, cache_position=[0, 1, 2, 3])
    assert np.array_equal(np.from_dlpack(out), x)
    tok = rnd(1, 3, 1, seed=9)
    out = cache.update_conv_state(tok, 0, cache_position=[4])
    got = np.from_dlpack(out)
    assert np.array_equal(got[..., :3], x[..., 1:]) and np.array_equal(got[..., 3:], tok)


def test_hybrid_mamba_attention_cache():
    cache = kvcache.HybridMambaAttentionDynamicCache(layer_types=["mamba", "attention", "mamba", "attention"],
                                                     conv_kernel=4)
    assert [layer.kind for layer in cache.layers] == [LayerKind.LINEAR, LayerKind.DYNAMIC] * 2
    x = rnd(1, 2, 5, 8)
    cache.update(x, x, 1)
    cache.update_conv_state(rnd(1, 6, 5), 0)
    assert cache.get_seq_length() == 5  # the first attention layer's length (layer 0 is linear)
    assert cache.is_linear == [True, False, True, False]

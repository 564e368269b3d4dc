"""End to end with the recurrent-state kinds (ABI 0.2 linear layers): Mamba and a Jamba hybrid generate the
same tokens with kvcache's DynamicCache as with transformers' own cache."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import kvcache  # noqa: E402
import kvcache.transformers as kvt  # noqa: E402

torch.set_num_threads(1)
IDS = torch.tensor([[5, 17, 33, 2, 61, 8, 44, 12]])
MODES = {
    "greedy": dict(max_new_tokens=10, do_sample=False),
    "sample": dict(max_new_tokens=10, do_sample=True, top_k=20),
    "beam": dict(max_new_tokens=8, do_sample=False, num_beams=3),
}


def mamba():
    cfg = transformers.MambaConfig(vocab_size=97, hidden_size=32, state_size=8, num_hidden_layers=2, conv_kernel=4,
                                   expand=2, initializer_range=0.6, pad_token_id=0, eos_token_id=None,
                                   bos_token_id=1)
    torch.manual_seed(0)
    return transformers.MambaForCausalLM(cfg).eval(), "cache_params"


def jamba():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.JambaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                       num_attention_heads=4, num_key_value_heads=2, attn_layer_period=2,
                                       attn_layer_offset=1, expert_layer_period=4, expert_layer_offset=3,
                                       mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=4,
                                       initializer_range=0.6, pad_token_id=0, eos_token_id=None)
    torch.manual_seed(0)
    return transformers.JambaForCausalLM(cfg).eval(), "past_key_values"


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("build", [mamba, jamba], ids=["mamba", "jamba"])
def test_recurrent_models_generate_the_same_tokens(build, mode):
    model, arg = build()
    kw = dict(MODES[mode], input_ids=IDS)
    torch.manual_seed(1)
    with torch.no_grad():
        ref = model.generate(**kw)
    cache = kvt.DynamicCache(config=model.config)
    torch.manual_seed(1)
    with torch.no_grad():
        got = model.generate(**kw, **{arg: cache})
    assert torch.equal(ref, got), f"\n{ref}\n{got}"
    assert len(set(ref[0, -8:].tolist())) > 2
    kinds = [layer.kind for layer in cache.layers]
    assert kvcache.LayerKind.LINEAR in kinds
    assert cache.has_previous_state()
    linear = kinds.index(kvcache.LayerKind.LINEAR)
    conv = cache.get_conv_state(linear)
    assert conv is not None and conv.shape[-1] == 4  # conv state keeps K columns
    assert conv.data_ptr() == cache.get_conv_state(linear).data_ptr()  # a zero-copy view of the C state

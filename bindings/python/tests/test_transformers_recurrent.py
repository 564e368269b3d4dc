"""End to end with the recurrent-state kinds (ABI 0.2 linear layers): Mamba and a Jamba hybrid generate the
same tokens with kvcache's DynamicCache as with transformers' own cache."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import kvcache  # noqa: E402
import kvcache.transformers as kvt  # noqa: E402
import tiny_models  # noqa: E402
from transformers_release import generate_cache_kwarg, needs_linear_layers  # noqa: E402

torch.set_num_threads(1)
IDS = torch.tensor([[5, 17, 33, 2, 61, 8, 44, 12]])
MODES = {
    "greedy": dict(max_new_tokens=10, do_sample=False),
    "sample": dict(max_new_tokens=10, do_sample=True, top_k=20),
    "beam": dict(max_new_tokens=8, do_sample=False, num_beams=3),
}


@needs_linear_layers
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", ["mamba", "jamba"])
def test_recurrent_models_generate_the_same_tokens(name, mode):
    model = tiny_models.BUILDERS[name]()
    arg = generate_cache_kwarg(model)  # Mamba's cache_params= and Jamba's past_key_values= became cache= in 5.24
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

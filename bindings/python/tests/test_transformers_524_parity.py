"""transformers 5.24 parity in the C-binding layer: static crop (and 5.23's refusal behind transformers_release),
is_croppable, get_query_offset with the MtpCache / DFlashCache rules (docs/transformers-5.24.md)."""
import numpy as np
import pytest

import kvcache


def _tokens(n, first=0):
    x = np.arange(first, first + n, dtype=np.float32).reshape(1, 1, n, 1)
    return np.repeat(x, 2, axis=-1) + 1.0


def test_static_crop_moves_the_counter_and_keeps_the_slots():
    c = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=8)
    c.update(_tokens(5), _tokens(5), 0)
    assert c.is_croppable
    c.crop(-2)
    assert c.get_seq_length() == 3
    keys = np.from_dlpack(c.layer_view(0).keys)[0, 0, :, 0]
    assert keys.tolist() == [1, 2, 3, 4, 5, 0, 0, 0]  # the stale slots stay until overwritten
    c.update(_tokens(1, 10), _tokens(1, 10), 0)
    assert np.from_dlpack(c.layer_view(0).keys)[0, 0, :, 0].tolist() == [1, 2, 3, 11, 5, 0, 0, 0]


def test_release_5_23_refuses_static_crop():
    c = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=8, transformers_release=52300)
    c.update(_tokens(3), _tokens(3), 0)
    assert not c.is_croppable
    with pytest.raises(kvcache.UnsupportedError, match="5.23"):
        c.crop(-1)
    assert c.get_seq_length() == 3


def test_static_sliding_is_croppable_only_within_its_window():
    wide = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=8, sliding_window=4,
                               layer_types=["sliding_attention"])
    narrow = kvcache.StaticCache(num_hidden_layers=1, max_cache_len=4, sliding_window=8,
                                 layer_types=["sliding_attention"])
    assert not wide.layer_is_croppable(0) and narrow.layer_is_croppable(0)
    wide.update(_tokens(5), _tokens(5), 0)  # 5 tokens through 4 slots: the window moved
    with pytest.raises(kvcache.InvalidStateError):
        wide.crop(-1)


def test_query_offsets():
    plain, mtp, dflash = kvcache.DynamicCache(), kvcache.MtpCache(), kvcache.DFlashCache()
    for c in (plain, mtp, dflash):
        c.update(_tokens(3), _tokens(3), 0)
    assert plain.get_query_offset(0) == 3 and plain.get_mask_sizes(2, 0) == (5, 0)
    assert mtp.get_query_offset(0) == 4 and mtp.get_mask_sizes(2, 0) == (5, 1)
    assert mtp.get_query_offset(2) == 3  # a layer not created yet: 0 + depth 2 + 1
    dflash.set_previous_accepted_tokens(2)
    assert dflash.get_query_offset(0) == 5 and dflash.get_mask_sizes(2, 0) == (7, 0)
    with pytest.raises(kvcache.UnsupportedError):
        plain.set_previous_accepted_tokens(1)
    with pytest.raises(kvcache.InvalidArgumentError):
        dflash.set_previous_accepted_tokens(-1)

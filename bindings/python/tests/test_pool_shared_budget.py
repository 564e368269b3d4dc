"""kvcache.Pool(shared_budget_bytes=...): one block budget for all groups (kvc_pool_options.shared_budget_bytes)."""
from __future__ import annotations

import pytest

import kvcache

torch = pytest.importorskip("torch", reason="SKIPPED: the pool tests use torch tensors (scripts/setup.sh installs torch)")

HEADS, DIM = 2, 8
PAGE = 2 * (4 * HEADS * DIM * 4)  # one layer of the group: K and V of 4 tokens, float32


def make_pool(pages, **kwargs):
    return kvcache.Pool(dtype=torch.float32,
                        groups=[kvcache.PoolGroup("full", block_size=4), kvcache.PoolGroup("sliding", block_size=4,
                                                                                           window=4)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM),
                                kvcache.PoolLayer(group=1, num_kv_heads=HEADS, head_dim=DIM)],
                        shared_budget_bytes=pages * PAGE, **kwargs)


def test_the_groups_share_one_budget_and_writes_land_in_pages():
    with make_pool(9, events=64) as pool, pool.sequence() as seq:
        assert [pool.stats(g).num_blocks for g in (0, 1)] == [8, 8]
        tokens = list(range(100, 116))
        slots = seq.reserve(tokens)  # 4 blocks in each group: the whole budget
        assert pool.stats(0).free_blocks == 0 and pool.stats(1).used_blocks == 4
        keys = [torch.arange(16 * HEADS * DIM, dtype=torch.float32).reshape(16, HEADS, DIM) + 1000 * l
                for l in range(2)]
        pool.write(keys, [-k for k in keys], slots)
        seq.commit()
        for layer in range(2):
            k, v = seq.gather(layer)
            assert torch.equal(k[0].permute(1, 0, 2), keys[layer]) and torch.equal(v[0].permute(1, 0, 2), -keys[layer])
        k_view = torch.from_dlpack(pool.layer_storage(0).keys)
        assert k_view.stride(0) == PAGE // 4  # a page, not a block, from one block to the next
        # token 5 of layer 0 (block s5 // 4, offset s5 % 4) read through the view
        s5 = slots.group(0)[5]
        assert torch.equal(k_view[s5 // 4, s5 % 4], keys[0][5])
        seq.reserve([7])  # the sliding group's window gives back blocks the full group then takes
        assert pool.stats(0).used_blocks == 5 and pool.stats(1).used_blocks == 2


def test_bad_budgets_are_refused_naming_the_field():
    one_group = dict(dtype=torch.float32, groups=[kvcache.PoolGroup("full", block_size=4)],
                     layers=[kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM)])
    with pytest.raises(kvcache.InvalidArgumentError, match="shared_budget_bytes is 100"):
        kvcache.Pool(**one_group, shared_budget_bytes=100)
    with pytest.raises(kvcache.InvalidArgumentError, match=r"groups\[0\].num_blocks is 8"):
        kvcache.Pool(dtype=torch.float32, groups=[kvcache.PoolGroup("full", block_size=4, num_blocks=8)],
                     layers=[kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM)],
                     shared_budget_bytes=9 * PAGE)
    with pytest.raises(kvcache.InvalidArgumentError, match="shared_budget_bytes is -1"):
        kvcache.Pool(**one_group, shared_budget_bytes=-1)

"""FP8 pool storage (vLLM's kv_cache_dtype="fp8": per-layer k_scale / v_scale) and latent (MLA) groups from
Python. The fp8 reference is torch's own float8_e4m3fn conversion: a block holds (x / scale).to(e4m3fn) and a
gather returns code.float() * scale. A latent layer has one row per token and no V."""
from __future__ import annotations

import pytest

import kvcache

torch = pytest.importorskip("torch", reason="SKIPPED: the pool tests use torch tensors (scripts/setup.sh installs torch)")
if not hasattr(torch, "float8_e4m3fn"):
    pytest.skip("SKIPPED: this torch has no float8_e4m3fn, the reference of the fp8 codes", allow_module_level=True)

BLOCK = 4


def fp8_pool(layout="NHD"):
    return kvcache.Pool(dtype=torch.float32, groups=[kvcache.PoolGroup("full", block_size=BLOCK, num_blocks=12)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=2, head_dim=8, value_head_dim=4,
                                                  storage="fp8", k_scale=0.25, v_scale=3.0),
                                kvcache.PoolLayer(group=0, num_kv_heads=2, head_dim=8, value_head_dim=4)],
                        hash_seed=b"fp8-model", layout=layout)


def inputs(n, seed):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(n, 2, 8, generator=g) * 40
    v = torch.randn(n, 2, 4, generator=g) * 900
    k[0, 0, 0] = 1000.0  # saturates: 4000 > 448
    return k, v


def codes(x, scale):
    return (x / scale).to(torch.float8_e4m3fn)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_fp8_layer_holds_torchs_codes_and_gathers_code_times_scale(layout):
    with fp8_pool(layout) as pool, pool.sequence() as seq:
        slots = seq.reserve(list(range(1, 11)))
        k, v = inputs(10, 1)
        for layer in range(2):
            pool.write_layer(layer, k, v, slots)
        seq.commit()
        gk, gv = seq.gather(0)
        assert torch.equal(gk[0].permute(1, 0, 2), codes(k, 0.25).float() * 0.25)
        assert torch.equal(gv[0].permute(1, 0, 2), codes(v, 3.0).float() * 3.0)
        assert gk[0, 0, 0, 0].item() == 448 * 0.25
        gk1, gv1 = seq.gather(1)  # the dtype layer beside it keeps its inputs
        assert torch.equal(gk1[0].permute(1, 0, 2), k) and torch.equal(gv1[0].permute(1, 0, 2), v)
        sk, sv = (torch.from_dlpack(t) for t in pool.layer_storage(0, "NHD"))
        assert sk.dtype == torch.uint8 and sv.dtype == torch.uint8
        flat = sk.reshape(-1, 2, 8)  # [block * block_size + offset, heads, dim]: slot order
        rows = torch.tensor(slots.group(0))
        assert torch.equal(flat[rows], codes(k, 0.25).view(torch.uint8))


def test_fp8_fork_and_file_keep_the_codes(tmp_path):
    with fp8_pool() as pool:
        a = pool.sequence()
        slots = a.reserve([5, 6, 7, 8, 9, 10])
        k, v = inputs(6, 2)
        pool.write([k, k], [v, v], slots)
        a.commit()
        b = a.fork()
        k2, v2 = inputs(1, 3)
        pool.write([k2, k2], [v2, v2], b.reserve([11]))
        b.commit()
        ga, _ = a.gather(0)
        gb, _ = b.gather(0)
        assert torch.equal(gb[:, :, :6], ga)
        path = str(tmp_path / "seq.kvc")
        b.save(path)
        with fp8_pool() as other:
            c = other.load_sequence(path)
            assert torch.equal(c.gather(0).keys, gb)


def test_fp8_refusals_name_the_field():
    with pytest.raises(kvcache.InvalidArgumentError, match=r"layers\[0\].k_scale is 0"):
        kvcache.Pool(dtype=torch.float32, groups=[kvcache.PoolGroup("full", block_size=4, num_blocks=4)],
                     layers=[kvcache.PoolLayer(group=0, num_kv_heads=1, head_dim=4, storage="fp8", k_scale=0.0)])
    with pytest.raises(kvcache.InvalidArgumentError, match="storage"):
        kvcache.PoolLayer(group=0, num_kv_heads=1, head_dim=4, storage="fp9")._to_lib(0)


def latent_pool():
    return kvcache.Pool(dtype=torch.float32, groups=[kvcache.PoolGroup("latent", block_size=BLOCK, num_blocks=10)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=1, head_dim=12)] * 2, hash_seed=b"mla")


def test_latent_rows_without_v():
    with latent_pool() as pool, pool.sequence() as seq:
        slots = seq.reserve(list(range(1, 10)))
        rows = [torch.randn(9, 1, 12) for _ in range(2)]
        pool.write_layer(0, rows[0], None, slots)
        pool.write(rows, [None, None], slots)  # latent layers take no values
        seq.commit()
        for layer in range(2):
            k, v = seq.gather(layer)
            assert v is None and torch.equal(k[0].permute(1, 0, 2), rows[layer])
        sk, sv = pool.layer_storage(0)
        assert sv is None and torch.from_dlpack(sk).shape == (10, BLOCK, 1, 12)
        other = pool.sequence()
        assert other.match_prefix(list(range(1, 10))) == 8
        with pytest.raises(kvcache.InvalidArgumentError, match="latent group"):
            pool.write_layer(0, rows[0], rows[0], slots)
        assert storage_bytes() == 2 * (10 * BLOCK * 12 * 4 + 255)


def storage_bytes():
    return kvcache.Pool.storage_bytes(dtype=torch.float32, groups=[kvcache.PoolGroup("latent", block_size=BLOCK,
                                                                                     num_blocks=10)],
                                      layers=[kvcache.PoolLayer(group=0, num_kv_heads=1, head_dim=12)] * 2)

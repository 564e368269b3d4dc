"""Tiers below the pool from Python (kvcache.DiskTier, Pool.add_tier): a restart matches from disk with the
original bytes, eviction to disk and back, counters, another fingerprint never shares, and bad input refused
with the pool unchanged."""
from __future__ import annotations

import pytest

import kvcache

torch = pytest.importorskip("torch", reason="SKIPPED: the tier tests use torch tensors (scripts/setup.sh installs torch)")

BLOCK, HEADS, DIM = 4, 2, 8


def make_pool(num_blocks=16, layout="NHD"):
    return kvcache.Pool(dtype=torch.float32, groups=[kvcache.PoolGroup("full", block_size=BLOCK, num_blocks=num_blocks)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM)] * 2,
                        hash_seed=b"tier-test", layout=layout)


def kv(n, start):
    k = [torch.arange(n * HEADS * DIM, dtype=torch.float32).reshape(n, HEADS, DIM) + start + 1000 * l for l in range(2)]
    return k, [-x for x in k]


def compute(pool, seq, tokens, start=0.0):
    slots = seq.reserve(tokens)
    keys, values = kv(len(tokens), start)
    pool.write(keys, values, slots)
    seq.commit()
    return keys, values


PROMPT = list(range(100, 117))  # 4 full blocks and one token


def test_restart_hits_from_disk_with_the_original_bytes(tmp_path):
    pool = make_pool()
    tier = kvcache.DiskTier(tmp_path, max_bytes=1 << 20)
    pool.add_tier(tier, write="commit")
    with pool.sequence() as seq:
        keys, values = compute(pool, seq, PROMPT)
    assert tier.stats().puts == 4
    assert pool.tier_stats(0) == tier.stats()
    fp = pool.fingerprint()
    pool.close()

    again = make_pool()
    again.add_tier(kvcache.DiskTier(str(tmp_path)))
    assert again.fingerprint() == fp and len(fp) == 32
    with again.sequence() as seq:
        assert seq.match_prefix(PROMPT) == 16
        k, v = seq.gather(0)
        assert torch.equal(k[0].permute(1, 0, 2), keys[0][:16])
        assert torch.equal(v[0].permute(1, 0, 2), values[0][:16])
    st = again.tier_stats(0)
    assert (st.hits, st.corrupt, st.puts) == (4, 0, 0)
    again.close()

    other = make_pool(layout="HND")  # the same model in another layout: another fingerprint
    other.add_tier(kvcache.DiskTier(tmp_path))
    with other.sequence() as seq:
        assert seq.match_prefix(PROMPT) == 0
    other.close()


def test_evicted_blocks_come_back_from_disk(tmp_path):
    pool = make_pool(num_blocks=5)  # 4 usable blocks
    pool.add_tier(kvcache.DiskTier(tmp_path), write=kvcache.TierWrite.EVICT)
    with pool.sequence() as seq:
        keys, _ = compute(pool, seq, PROMPT[:16])
    with pool.sequence() as seq:
        compute(pool, seq, list(range(500, 516)), start=7.0)  # evicts the first prompt's blocks to disk
    assert pool.tier_stats().puts == 4
    with pool.sequence() as seq:
        assert seq.match_prefix(PROMPT) == 16
        assert torch.equal(seq.gather(1)[0][0].permute(1, 0, 2), keys[1])
    pool.close()


def test_bad_input_leaves_the_pool_unchanged(tmp_path):
    pool = make_pool()
    tier = kvcache.DiskTier(tmp_path)
    with pytest.raises(kvcache.InvalidArgumentError, match="write"):
        pool.add_tier(tier, write="sometimes")
    with pytest.raises(kvcache.InvalidArgumentError, match="DiskTier"):
        pool.add_tier("not a tier")
    with pytest.raises(IndexError):
        pool.tier_stats(0)  # still no tier
    pool.add_tier(tier)
    with pytest.raises(kvcache.InvalidArgumentError, match="given to a pool"):
        pool.add_tier(tier)
    with pytest.raises(IndexError):
        pool.tier_stats(1)
    with pytest.raises(kvcache.InvalidArgumentError, match="max_bytes"):
        kvcache.DiskTier(tmp_path, max_bytes=-1)
    with pytest.raises(kvcache.InvalidArgumentError, match="directory"):
        kvcache.DiskTier("")
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(kvcache.KvcacheError, match="cannot be created or used"):
        kvcache.DiskTier(tmp_path / "file")
    assert pool.tier_stats(0).puts == 0
    pool.close()


KEY_A, KEY_B = b"A" * 32, b"B" * 32


def fill(directory, auth_key):
    pool = make_pool()
    pool.add_tier(kvcache.DiskTier(directory, auth_key=auth_key))
    with pool.sequence() as seq:
        keys, _ = compute(pool, seq, PROMPT)
    pool.close()
    return keys


def match(directory, auth_key):
    """Matches PROMPT in a new pool on `directory`: (tokens matched, tier stats, layer 0's keys gathered)."""
    pool = make_pool()
    pool.add_tier(kvcache.DiskTier(directory, auth_key=auth_key))
    with pool.sequence() as seq:
        matched = seq.match_prefix(PROMPT)
        k = seq.gather(0)[0][0].permute(1, 0, 2).clone() if matched else None
    st = pool.tier_stats(0)
    pool.close()
    return matched, st, k


def test_authenticated_tier_round_trips_with_its_key_only(tmp_path):
    keyed, keyless = tmp_path / "keyed", tmp_path / "keyless"
    keys = fill(keyed, KEY_A)
    fill(keyless, None)
    matched, st, k = match(keyed, bytearray(KEY_A))  # any bytes-like key
    assert matched == 16 and st.hits == 4 and st.corrupt == 0
    assert torch.equal(k, keys[0][:16])
    for directory, key in ((keyed, KEY_B), (keyed, None), (keyless, KEY_A)):
        matched, st, _ = match(directory, key)
        assert (matched, st.hits, st.corrupt) == (0, 0, 1), (directory.name, key)
    assert match(keyless, None)[0] == 16  # keyless tiers as before
    assert "auth_key=<set>" in repr(kvcache.DiskTier(keyed, auth_key=KEY_A))


def test_authenticated_frame_moved_under_another_key_misses(tmp_path):
    fill(tmp_path, KEY_A)
    files = sorted(p for p in tmp_path.rglob("*.kvtb"))
    assert len(files) == 4
    data = [p.read_bytes() for p in files]
    assert all(d[4] == 2 for d in data)  # frame version 2: authenticated
    for i, p in enumerate(files):  # each file: the next one's K/V and MAC under its own header key
        donor = data[(i + 1) % 4]
        p.write_bytes(donor[:8] + data[i][8:80] + donor[80:])
    matched, st, _ = match(tmp_path, KEY_A)
    assert (matched, st.hits, st.corrupt) == (0, 0, 1)


def test_bad_auth_keys_refused(tmp_path):
    with pytest.raises(kvcache.InvalidArgumentError, match=r"auth_key_len is 15; an authentication key is 16 to 256"):
        kvcache.DiskTier(tmp_path, auth_key=b"k" * 15)
    with pytest.raises(kvcache.InvalidArgumentError, match="auth_key_len is 257"):
        kvcache.DiskTier(tmp_path, auth_key=b"k" * 257)
    with pytest.raises(kvcache.InvalidArgumentError, match="auth_key_len is 0"):
        kvcache.DiskTier(tmp_path, auth_key=b"")
    with pytest.raises(TypeError, match="auth_key must be bytes, not str"):
        kvcache.DiskTier(tmp_path, auth_key="a text key of enough length")
    assert kvcache.DiskTier(tmp_path, auth_key=b"k" * 16).authenticated


def test_raw_set_auth_key(tmp_path):
    """kvc_tier_set_auth_key, the raw ABI's form of a key (for stores a program brings; here a disk tier)."""
    from kvcache import _lib

    fill(tmp_path, KEY_A)
    tier = kvcache.DiskTier(tmp_path)
    with pytest.raises(kvcache.InvalidArgumentError, match="key_len is 8"):
        _lib.kvc_tier_set_auth_key(tier._capsule, b"12345678")
    _lib.kvc_tier_set_auth_key(tier._capsule, KEY_A)
    pool = make_pool()
    pool.add_tier(tier)
    with pool.sequence() as seq:
        assert seq.match_prefix(PROMPT) == 16
    with pytest.raises(kvcache.InvalidArgumentError, match="given to a pool already"):
        _lib.kvc_tier_set_auth_key(tier._capsule, KEY_B)
    pool.close()

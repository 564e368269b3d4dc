"""Blocks by key from Python (kvcache.Tier.exists, get_blocks, put_blocks; kvcache.model_fingerprint): round trips
on a disk tier into an engine's own buffers, a pool's blocks read by key and blocks put by key matched by a pool
(the keys from the options and the router's hash chain, no pool needed for them), misses for another size or a
forged value, and bad arguments refused naming them with nothing stored. The Redis tier's are in
test_redis_tier.py (they need its server)."""
from __future__ import annotations

import pytest

import kvcache

torch = pytest.importorskip("torch", reason="SKIPPED: the tier tests use torch tensors (scripts/setup.sh installs torch)")

BLOCK, HEADS, DIM = 4, 2, 8
SEED = b"keys-test"
GROUPS = [kvcache.PoolGroup("full", block_size=BLOCK, num_blocks=16)]
LAYERS = [kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM)] * 2
PROMPT = list(range(100, 113))  # three full blocks and one token


def keys_of(tokens, fingerprint):
    root = kvcache.block_hash_root(SEED)
    return [kvcache.TierKey(fingerprint, h, 0) for h in kvcache.block_hash_chain(root, tokens, BLOCK)]


def test_fingerprint_without_a_pool_is_the_pools():
    fp = kvcache.model_fingerprint(dtype=torch.float32, groups=GROUPS, layers=LAYERS, hash_seed=SEED)
    with kvcache.Pool(dtype=torch.float32, groups=GROUPS, layers=LAYERS, hash_seed=SEED) as pool:
        assert pool.fingerprint() == fp
    assert kvcache.model_fingerprint(dtype=torch.float32, groups=GROUPS, layers=LAYERS, hash_seed=b"other") != fp
    assert kvcache.model_fingerprint(dtype=torch.float16, groups=GROUPS, layers=LAYERS, hash_seed=SEED) != fp
    size, layers = kvcache.model_block_payload(dtype=torch.float32, groups=GROUPS, layers=LAYERS)
    assert (size, layers) == (2 * 2 * BLOCK * HEADS * DIM * 4, 2)  # 2 layers, K and V, float32
    with pytest.raises(kvcache.InvalidArgumentError, match="group is 1"):
        kvcache.model_block_payload(dtype=torch.float32, groups=GROUPS, layers=LAYERS, group=1)


def test_round_trip_into_an_engines_buffers(tmp_path):
    tier = kvcache.DiskTier(tmp_path)
    fp = bytes(range(32))
    keys = [kvcache.TierKey(fp, bytes([i]) * 32, i % 2) for i in range(5)]
    payloads = [bytes((i * 7 + j) % 251 for j in range(300)) for i in range(5)]
    assert tier.exists(keys) == [False] * 5
    assert tier.put_blocks([keys[0], keys[3]], [payloads[0], payloads[3]], num_layers=2) == 2
    assert tier.exists(keys) == [True, False, False, True, False]
    bufs = [bytearray(300) for _ in keys]
    assert tier.get_blocks(keys, bufs, num_layers=2) == [True, False, False, True, False]
    assert bytes(bufs[0]) == payloads[0] and bytes(bufs[3]) == payloads[3]
    # A torch CPU tensor's memory, as an engine's block would be: through NumPy's buffer.
    block = torch.zeros(300, dtype=torch.uint8)
    assert tier.get_blocks([keys[3]], [block.numpy()], num_layers=2) == [True]
    assert bytes(block.numpy()) == payloads[3]
    # Another size or layer count is a miss, never a short block.
    assert tier.get_blocks([keys[0]], [bytearray(299)], num_layers=2) == [False]
    assert tier.get_blocks([keys[0]], [bytearray(300)], num_layers=3) == [False]
    stats = tier.stats()
    assert (stats.puts, stats.hits, stats.corrupt) == (2, 3, 2)


def test_a_pool_and_a_key_reader_share_blocks(tmp_path):
    fp = kvcache.model_fingerprint(dtype=torch.float32, groups=GROUPS, layers=LAYERS, hash_seed=SEED)
    size, layers = kvcache.model_block_payload(dtype=torch.float32, groups=GROUPS, layers=LAYERS)
    keys = keys_of(PROMPT, fp)
    with kvcache.Pool(dtype=torch.float32, groups=GROUPS, layers=LAYERS, hash_seed=SEED) as pool:
        pool.add_tier(kvcache.DiskTier(tmp_path / "a"), write="commit")
        with pool.sequence() as seq:
            slots = seq.reserve(PROMPT)
            k = [torch.randn(len(PROMPT), HEADS, DIM) for _ in range(2)]
            pool.write(k, [-x for x in k], slots)
            seq.commit()
    reader = kvcache.DiskTier(tmp_path / "a")
    bufs = [bytearray(size) for _ in keys]
    assert reader.exists(keys) == [True] * 3
    assert reader.get_blocks(keys, bufs, layers) == [True] * 3
    # NHD: block 0 of layer 0 starts with K of token 0, head 0.
    assert torch.equal(torch.frombuffer(bufs[0], dtype=torch.float32)[:DIM], k[0][0, 0])
    # Put by key elsewhere: a fresh pool matches the prompt from there.
    writer = kvcache.DiskTier(tmp_path / "b")
    assert writer.put_blocks(keys, bufs, layers) == 3
    with kvcache.Pool(dtype=torch.float32, groups=GROUPS, layers=LAYERS, hash_seed=SEED) as pool:
        pool.add_tier(kvcache.DiskTier(tmp_path / "b"))
        with pool.sequence() as seq:
            assert seq.match_prefix(PROMPT) == 12


def test_forged_value_is_a_miss_in_a_keyed_tier(tmp_path):
    auth = bytes(range(16))
    tier = kvcache.DiskTier(tmp_path, auth_key=auth)
    fp = bytes(32)
    keys = [kvcache.TierKey(fp, bytes([1]) * 32), kvcache.TierKey(fp, bytes([2]) * 32)]
    assert tier.put_blocks(keys, [b"a" * 64, b"b" * 64], num_layers=1) == 2
    files = sorted(p for p in tmp_path.rglob("*.kvtb"))
    assert len(files) == 2
    data = [f.read_bytes() for f in files]
    forged = data[1][:8] + data[0][8:80] + data[1][80:]  # block 1's value under block 0's key: no MAC to redo
    files[0].write_bytes(forged)
    got = tier.get_blocks(keys, [bytearray(64), bytearray(64)], num_layers=1)
    assert got.count(True) == 1
    assert tier.stats().corrupt == 1


def test_bad_arguments_are_refused_and_nothing_is_stored(tmp_path):
    tier = kvcache.DiskTier(tmp_path)
    key = kvcache.TierKey(bytes(32), bytes(32))
    with pytest.raises(kvcache.InvalidArgumentError, match=r"keys\[0\].fingerprint"):
        tier.exists([kvcache.TierKey(b"short", bytes(32))])
    with pytest.raises(TypeError, match="TierKey"):
        tier.exists([(bytes(32), bytes(32), 0)])
    with pytest.raises(kvcache.InvalidArgumentError, match=r"payloads\[1\] is 3 bytes"):
        tier.put_blocks([key, key], [b"abcd", b"abc"], num_layers=1)
    with pytest.raises(kvcache.InvalidArgumentError, match="num_layers is 0"):
        tier.put_blocks([key], [b"abcd"], num_layers=0)
    with pytest.raises(kvcache.InvalidArgumentError, match="payload_size is 0"):
        tier.put_blocks([key], [b""], num_layers=1)
    with pytest.raises(kvcache.InvalidArgumentError, match="2 payload buffers for 1 keys"):
        tier.get_blocks([key], [bytearray(4), bytearray(4)], num_layers=1)
    with pytest.raises(kvcache.InvalidArgumentError, match="writable"):
        tier.get_blocks([key], [b"read-only"], num_layers=1)
    assert tier.exists([]) == []
    stats = tier.stats()
    assert (stats.puts, stats.put_failures, stats.gets) == (0, 0, 0)
    assert not list(tmp_path.rglob("*.kvtb"))


def test_a_tier_given_to_a_pool_is_the_pools(tmp_path):
    tier = kvcache.DiskTier(tmp_path)
    with kvcache.Pool(dtype=torch.float32, groups=GROUPS, layers=LAYERS, hash_seed=SEED) as pool:
        pool.add_tier(tier)
        with pytest.raises(kvcache.InvalidArgumentError, match="given to a pool"):
            tier.exists([kvcache.TierKey(bytes(32), bytes(32))])

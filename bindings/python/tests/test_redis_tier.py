"""The Redis tier from Python (kvcache.add_redis_tier): two pools with their own connections share a prompt's
prefix through a redis-server the test starts on 127.0.0.1 (the second pool's prefix comes from Redis and
gathers the same bytes), the tier's counters, and refused options. Skipped, with the reason, where redis-server
is not installed (scripts/setup.sh installs it)."""
from __future__ import annotations

import contextlib
import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

import kvcache

torch = pytest.importorskip("torch", reason="SKIPPED: the pool tests use torch tensors (scripts/setup.sh installs torch)")
if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
    pytest.skip("SKIPPED: redis-server is not installed (scripts/setup.sh installs it)", allow_module_level=True)

BLOCK, HEADS, DIM = 4, 2, 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    """In the server's process before exec: killed when the test process dies, even by a crash (Linux)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def redis_server():
    """A redis-server on 127.0.0.1 at a free port: (port, process), killed on exit."""
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir,
                                 "--save", "", "--appendonly", "no", "--logfile", ""],
                                stdout=subprocess.DEVNULL, preexec_fn=die_with_parent)
        try:
            for _ in range(250):
                ping = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True)
                if "PONG" in ping.stdout:
                    break
                time.sleep(0.02)
            else:
                pytest.fail("redis-server did not start")
            yield port, proc
        finally:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def redis_port():
    with redis_server() as (port, _):
        yield port


def make_pool():
    return kvcache.Pool(dtype=torch.float32, groups=[kvcache.PoolGroup("full", block_size=BLOCK, num_blocks=16)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM)] * 2,
                        hash_seed=b"redis-test-model")


def test_two_pools_share_a_prefix_through_redis(redis_port):
    tokens = list(range(500, 513))  # three full blocks and one token more
    seeds = f"127.0.0.1:{redis_port}"
    with make_pool() as writer, make_pool() as reader:
        assert kvcache.add_redis_tier(writer, seeds, key_prefix="py:") == 0
        assert kvcache.add_redis_tier(reader, [seeds], key_prefix="py:", cluster="off") == 0
        with writer.sequence() as seq:
            slots = seq.reserve(tokens)
            keys = [torch.randn(len(tokens), HEADS, DIM) for _ in range(2)]
            values = [torch.randn(len(tokens), HEADS, DIM) for _ in range(2)]
            writer.write(keys, values, slots)
            seq.commit()
        assert kvcache.tier_stats(writer).puts == 3
        with reader.sequence() as seq:
            assert seq.match_prefix(tokens) == 12  # nothing in the reader's memory: all from Redis
            stats = kvcache.tier_stats(reader, 0)
            assert stats.hits == 3 and stats.corrupt == 0 and stats.bytes_read > 0
            for layer in range(2):
                k, v = seq.gather(layer)
                assert torch.equal(torch.from_dlpack(k)[0].permute(1, 0, 2), keys[layer][:12])
                assert torch.equal(torch.from_dlpack(v)[0].permute(1, 0, 2), values[layer][:12])
        with pytest.raises(IndexError, match="index is 1"):
            kvcache.tier_stats(reader, 1)


def test_refused_options(redis_port):
    with make_pool() as pool:
        with pytest.raises(kvcache.InvalidArgumentError, match="not host:port"):
            kvcache.add_redis_tier(pool, "localhost")
        with pytest.raises(kvcache.InvalidArgumentError, match="hash tag"):
            kvcache.add_redis_tier(pool, f"127.0.0.1:{redis_port}", key_prefix="{x}")
        with pytest.raises(kvcache.InvalidArgumentError, match="cluster is 'maybe'"):
            kvcache.add_redis_tier(pool, f"127.0.0.1:{redis_port}", cluster="maybe")
        with pytest.raises(kvcache.KvcacheError, match="refused"):
            kvcache.add_redis_tier(pool, f"127.0.0.1:{free_port()}")
        with pytest.raises(kvcache.KvcacheError, match="cluster support disabled"):
            kvcache.add_redis_tier(pool, f"127.0.0.1:{redis_port}", cluster="on")
        with pytest.raises(IndexError):
            kvcache.tier_stats(pool, 0)  # every refusal left the pool without a tier


def test_call_timeout_bounds_creation():
    """call_timeout_ms reaches the library: a server that accepts and never answers ends creation at the call's
    deadline (150 ms), not after the command timeout (5 s)."""
    with make_pool() as pool, socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)  # never accepted: connects complete, commands go unanswered
        port = silent.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(kvcache.KvcacheError, match="call_timeout_ms 150"):
            kvcache.add_redis_tier(pool, f"127.0.0.1:{port}", command_timeout_ms=5000, call_timeout_ms=150)
        assert time.monotonic() - start < 2.0


def resp(port, *args):
    """One command to the server over RESP (bytes arguments); its reply (bulk strings as bytes, arrays as lists)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        out = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
        sock.sendall(out)
        f = sock.makefile("rb")

        def reply():
            line = f.readline()[:-2]
            if line[:1] == b"$":
                n = int(line[1:])
                return None if n < 0 else f.read(n + 2)[:-2]
            if line[:1] == b"*":
                return [reply() for _ in range(int(line[1:]))]
            return line
        return reply()


def test_authenticated_redis_tier(redis_port):
    seeds, tokens = f"127.0.0.1:{redis_port}", list(range(700, 713))  # three full blocks
    key_a, key_b = b"a redis tier key, 32 bytes long.", b"another tier key of 32 bytes...."
    with make_pool() as writer:
        kvcache.add_redis_tier(writer, seeds, key_prefix="py-auth:", auth_key=key_a)
        with writer.sequence() as seq:
            slots = seq.reserve(tokens)
            keys = [torch.randn(len(tokens), HEADS, DIM) for _ in range(2)]
            writer.write(keys, [-k for k in keys], slots)
            seq.commit()
        assert kvcache.tier_stats(writer).puts == 3

    def match(auth_key):
        with make_pool() as reader:
            kvcache.add_redis_tier(reader, seeds, key_prefix="py-auth:", auth_key=auth_key)
            with reader.sequence() as seq:
                matched = seq.match_prefix(tokens)
                same = matched and torch.equal(torch.from_dlpack(seq.gather(0)[0])[0].permute(1, 0, 2), keys[0][:12])
            st = kvcache.tier_stats(reader)
            return matched, st.hits, st.corrupt, bool(same)

    assert match(key_a) == (12, 3, 0, True)
    assert match(key_b) == (0, 0, 1, False)
    assert match(None) == (0, 0, 1, False)
    # A client of the server without the tier's key moves every value under another block's key.
    names = sorted(resp(redis_port, b"KEYS", b"py-auth:*"))
    assert len(names) == 3
    values = [resp(redis_port, b"GET", n) for n in names]
    for i, name in enumerate(names):
        donor = values[(i + 1) % 3]
        resp(redis_port, b"SET", name, donor[:8] + values[i][8:80] + donor[80:])
    assert match(key_a) == (0, 0, 1, False)
    with make_pool() as pool:
        with pytest.raises(kvcache.InvalidArgumentError, match="options.auth_key_len is 8"):
            kvcache.add_redis_tier(pool, seeds, auth_key=b"12345678")
        with pytest.raises(TypeError, match="auth_key must be bytes"):
            kvcache.add_redis_tier(pool, seeds, auth_key="text")
        with pytest.raises(IndexError):
            kvcache.tier_stats(pool, 0)  # refused: no tier


def test_redis_tier_by_key_and_in_a_pool(redis_port):
    """kvcache.RedisTier: blocks by key (EXISTS without fetching, get into an engine's buffers, put), and the same
    object given to a pool like a DiskTier, whose match then finds the blocks put by key."""
    seeds = f"127.0.0.1:{redis_port}"
    groups = [kvcache.PoolGroup("full", block_size=BLOCK, num_blocks=16)]
    layers = [kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM)] * 2
    seed = b"redis-keys-model"
    fp = kvcache.model_fingerprint(dtype=torch.float32, groups=groups, layers=layers, hash_seed=seed)
    size, num_layers = kvcache.model_block_payload(dtype=torch.float32, groups=groups, layers=layers)
    tokens = list(range(700, 709))  # two full blocks and one token
    hashes = kvcache.block_hash_chain(kvcache.block_hash_root(seed), tokens, BLOCK)
    keys = [kvcache.TierKey(fp, h, 0) for h in hashes]
    tier = kvcache.RedisTier(seeds, key_prefix="pykeys:", cluster="off")
    assert tier.exists(keys) == [False, False]
    payloads = [torch.randn(size // 4).numpy().tobytes() for _ in keys]
    assert tier.put_blocks(keys, payloads, num_layers) == 2
    assert tier.exists(keys) == [True, True]
    bufs = [bytearray(size) for _ in keys]
    assert tier.get_blocks(keys, bufs, num_layers) == [True, True]
    assert [bytes(b) for b in bufs] == payloads
    assert tier.get_blocks(keys[:1], [bytearray(size - 4)], num_layers) == [False]
    with kvcache.Pool(dtype=torch.float32, groups=groups, layers=layers, hash_seed=seed) as pool:
        pool.add_tier(kvcache.RedisTier(seeds, key_prefix="pykeys:"), write="commit")
        with pool.sequence() as seq:
            assert seq.match_prefix(tokens) == 8
        assert pool.tier_stats(0).hits == 2


def test_redis_tier_on_a_dead_server_is_a_miss_within_its_deadline():
    """A server that stops answering (SIGSTOP): exists and get are misses within call_timeout_ms, not errors."""
    with redis_server() as (port, proc):
        try:
            tier = kvcache.RedisTier(f"127.0.0.1:{port}", cluster="off", call_timeout_ms=300)
            key = kvcache.TierKey(bytes(32), bytes(32))
            assert tier.put_blocks([key], [b"x" * 100], num_layers=1) == 1
            proc.send_signal(signal.SIGSTOP)
            start = time.monotonic()
            assert tier.exists([key]) == [False]
            assert time.monotonic() - start < 0.3 + 0.75
            time.sleep(1.1)  # past reconnect_interval_ms: the node is tried again
            start = time.monotonic()
            assert tier.get_blocks([key], [bytearray(100)], num_layers=1) == [False]
            assert time.monotonic() - start < 0.3 + 0.75
            proc.send_signal(signal.SIGCONT)  # the same server, answering again: the block was there all along
            time.sleep(1.1)
            assert tier.exists([key]) == [True]
        finally:
            proc.send_signal(signal.SIGCONT)

"""kvcache.vllm_tier inside vLLM's own CPU offloading (TieringOffloadingSpec, TieringOffloadingManager and its
SecondaryTierFactory, from the wheel scripts/setup.sh installs in .venv-vllm/<release>), on the CPU alone.

One process stores a request's chunks through vLLM's manager into kvcache's disk tier, a standalone redis-server
and a three-node Redis Cluster; a second process (the restarted reader) looks them up and loads them, and checks
the bytes that reach vLLM's CPU tier. Another tenant's salt finds nothing; a value changed on disk is a miss
(checksum); a server that is dead (nothing listens) or stopped (SIGSTOP: accepts, never answers) is a miss within
the tier's deadline. The vLLM processes run vllm_tier_driver.py with vLLM on PYTHONPATH, so that importing vLLM
touches no other test."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
RELEASE = (ROOT / "scripts" / "vllm-release.txt").read_text().split()[0]
VLLM = ROOT / ".venv-vllm" / RELEASE
if not (VLLM / ".stamp").is_file():
    pytest.skip(f"SKIPPED: vLLM {RELEASE} is not installed in {VLLM} (scripts/setup.sh, install_vllm_wheel)",
                allow_module_level=True)
pytest.importorskip("torch", reason="SKIPPED: vLLM's offloading imports torch (scripts/setup.sh installs it)")
if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
    pytest.skip("SKIPPED: redis-server is not installed (scripts/setup.sh installs it)", allow_module_level=True)

CHUNKS = 4
DEADLINE_MS = 300


def free_port() -> int:
    """A free port whose cluster bus port (+10000) is a free port too."""
    while True:
        with socket.socket() as s, socket.socket() as bus:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if port + 10000 > 65535:
                continue
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
            return port


def cli(port: int, *args: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True).stdout


@contextlib.contextmanager
def redis_servers(n: int, cluster: bool):
    """n redis-servers on 127.0.0.1 (joined into one cluster without replicas when `cluster`): their processes
    and ports, killed on exit."""
    with tempfile.TemporaryDirectory() as workdir:
        procs, ports = [], []
        try:
            for i in range(n):
                port = free_port()
                extra = ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{i}.conf"] if cluster else []
                procs.append(subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir",
                                               workdir, "--save", "", "--appendonly", "no", *extra],
                                              stdout=subprocess.DEVNULL))
                ports.append(port)
            for port in ports:
                for _ in range(500):
                    if "PONG" in cli(port, "ping"):
                        break
                    time.sleep(0.02)
                else:
                    pytest.fail(f"redis-server on {port} did not start")
            if cluster:
                subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                                "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, check=True)
                for _ in range(500):
                    if all("cluster_state:ok" in cli(p, "cluster", "info") for p in ports):
                        break
                    time.sleep(0.02)
                else:
                    pytest.fail("the redis cluster did not become ok")
            yield procs, ports
        finally:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()


def run_vllm(jobs: list) -> list:
    """Runs the jobs in a new process of this Python with vLLM on its path; their results."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(VLLM), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("vllm_tier_driver.py")), json.dumps(jobs)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def tier(kind: str, **options) -> dict:
    return {"type": "KvcacheTier", "module_path": "kvcache.vllm_tier", "kind": kind, **options}


def redis(ports, cluster: bool) -> dict:
    return tier("redis", seeds=",".join(f"127.0.0.1:{p}" for p in ports), cluster="on" if cluster else "off",
                call_timeout_ms=DEADLINE_MS, connect_timeout_ms=50, command_timeout_ms=100)


def test_store_lookup_load_across_processes(tmp_path):
    disk, flipped = tier("disk", directory=str(tmp_path / "disk")), tier("disk", directory=str(tmp_path / "flip"))
    with redis_servers(1, False) as (_, [single]), redis_servers(3, True) as (_, nodes), \
            redis_servers(1, False) as ([stalled_proc], [stalled]):
        standalone, cluster, stopped = redis([single], False), redis(nodes, True), redis([stalled], False)
        dead = redis([free_port()], False)
        stores = [disk, flipped, standalone, cluster, stopped, dead]
        results = run_vllm([{"mode": "store", "tier": t, "chunks": CHUNKS, "salt": "tenant-a"} for t in stores])
        assert all(r["tier"] == "kvcache.vllm_tier.KvcacheTier" for r in results)
        assert [r["puts"] for r in results] == [CHUNKS] * 5 + [0]  # the dead server took nothing
        for path in (tmp_path / "flip").rglob("*"):  # one byte of every stored value changed
            if path.is_file():
                data = bytearray(path.read_bytes())
                data[len(data) // 2] ^= 0x01
                path.write_bytes(bytes(data))
        os.kill(stalled_proc.pid, signal.SIGSTOP)
        loads = [(disk, "tenant-a"), (disk, "tenant-b"), (standalone, "tenant-a"), (cluster, "tenant-a"),
                 (flipped, "tenant-a"), (stopped, "tenant-a"), (dead, "tenant-a")]
        got = run_vllm([{"mode": "load", "tier": t, "chunks": CHUNKS, "salt": salt} for t, salt in loads])
    hit_pending, hit, miss = ["HIT_PENDING"] * CHUNKS, ["HIT"] * CHUNKS, ["MISS"] * CHUNKS
    for r in (got[0], got[2], got[3]):  # found below the empty CPU tier, promoted, byte for byte
        assert (r["first"], r["second"], r["verified"]) == (hit_pending, hit, CHUNKS), r
    assert (got[1]["first"], got[1]["verified"]) == (miss, 0)  # another tenant's salt: other keys
    assert got[4]["verified"] == 0 and got[4]["corrupt"] >= 1 and "HIT" not in got[4]["second"]
    for r in (got[5], got[6]):  # stopped and dead servers: misses, each within the deadline
        assert (r["first"], r["second"], r["verified"]) == (miss, miss, 0), r
        assert r["lookup_s"] < CHUNKS * 2 * DEADLINE_MS / 1000 + 1.0, r

"""The block pool (kvcache.Pool) from Python: prefix reuse, copy-on-write, the data path through slot mappings,
zero-copy table and storage views, events and their hashes, errors, and lifetimes."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import kvcache

torch = pytest.importorskip("torch", reason="SKIPPED: the pool tests use torch tensors (scripts/setup.sh installs torch)")

BLOCK = 4
HEADS = 2
DIM = 8
VDIM = 4


def make_pool(num_blocks=16, layers=2, dtype=torch.float32, events=256, prefix_caching=True, layout="NHD",
              seed=b"test-model"):
    return kvcache.Pool(dtype=dtype, groups=[kvcache.PoolGroup("full", block_size=BLOCK, num_blocks=num_blocks)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM, value_head_dim=VDIM)]
                        * layers, hash_seed=seed, events=events, prefix_caching=prefix_caching, layout=layout)


def step_kv(n, layers=2, start=0.0, dtype=torch.float32):
    """Distinct K/V per layer and token: [n, heads, dim] and [n, heads, vdim]."""
    keys = [(torch.arange(n * HEADS * DIM, dtype=torch.float64).reshape(n, HEADS, DIM) + 1000 * l + start).to(dtype)
            for l in range(layers)]
    values = [(-torch.arange(n * HEADS * VDIM, dtype=torch.float64).reshape(n, HEADS, VDIM) - 1000 * l - start)
              .to(dtype) for l in range(layers)]
    return keys, values


def prefill(pool, seq, tokens, start=0.0):
    slots = seq.reserve(tokens)
    keys, values = step_kv(len(tokens), pool.num_layers, start, {kvcache.Dtype.FLOAT32: torch.float32,
                                                                 kvcache.Dtype.BFLOAT16: torch.bfloat16,
                                                                 kvcache.Dtype.FLOAT16: torch.float16}[pool.dtype])
    pool.write(keys, values, slots)
    seq.commit()
    return slots, keys, values


def as_token_major(x):
    """[1, heads, n, dim] (gather's layout) -> [n, heads, dim] (write's layout)."""
    return x[0].permute(1, 0, 2)


# ----------------------------------------------------------------- the data path


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_write_through_the_slot_mapping_then_gather_equals_the_input(dtype):
    with make_pool(dtype=dtype) as pool, pool.sequence() as seq:
        tokens = list(range(100, 111))  # 11 tokens: 2 full blocks and a partial one
        _, keys, values = prefill(pool, seq, tokens)
        assert len(seq) == 11 and seq.committed == 11
        for layer in range(pool.num_layers):
            k, v = seq.gather(layer)
            assert k.shape == (1, HEADS, 11, DIM) and v.shape == (1, HEADS, 11, VDIM) and k.dtype == dtype
            assert torch.equal(as_token_major(k), keys[layer])
            assert torch.equal(as_token_major(v), values[layer])
        # decode steps append one token at a time
        for t in range(5):
            slots = seq.reserve([200 + t])
            k1, v1 = step_kv(1, pool.num_layers, start=0.5 + t, dtype=dtype)
            pool.write(k1, v1, slots)
            seq.commit()
            keys = [torch.cat([a, b]) for a, b in zip(keys, k1)]
            values = [torch.cat([a, b]) for a, b in zip(values, v1)]
        for layer in range(pool.num_layers):
            k, v = seq.gather(layer)
            assert torch.equal(as_token_major(k), keys[layer]) and torch.equal(as_token_major(v), values[layer])


def test_gather_into_caller_tensors_and_a_batch_written_in_one_call():
    with make_pool() as pool:
        a, b = pool.sequence(), pool.sequence()
        sa, sb = a.reserve([1, 2, 3]), b.reserve([7, 8, 9, 10, 11])
        both = kvcache.SlotMapping.concat([sa, sb])
        assert both.tolist() == [sa.tolist()[0] + sb.tolist()[0]]
        keys, values = step_kv(8)
        pool.write(keys, values, [sa, sb])  # a list of mappings is concatenated group by group
        k = torch.full((1, HEADS, 5, DIM), -7.0)
        v = torch.full((1, HEADS, 5, VDIM), -7.0)
        out = b.gather(1, k, v)
        assert out.keys is k and torch.equal(as_token_major(k), keys[1][3:])
        assert torch.equal(as_token_major(v), values[1][3:])
        a.close()
        b.close()


def test_slot_mapping_form():
    with make_pool() as pool, pool.sequence() as seq:
        m = seq.reserve([5] * 6)
        assert isinstance(m, kvcache.SlotMapping) and m.num_groups == 1 and len(m) == 6
        blocks = [s // BLOCK for s in m.group(0)]
        assert [s % BLOCK for s in m.group(0)] == [0, 1, 2, 3, 0, 1]
        assert blocks[:4] == [blocks[0]] * 4 and blocks[4] == blocks[5] != blocks[0] and 0 not in blocks
        t = torch.frombuffer(m.data, dtype=torch.int64).view(m.num_groups, -1)
        assert t.tolist() == m.tolist()


# ------------------------------------------------------------- prefix sharing


def test_a_prefix_shared_between_two_sequences_hits():
    with make_pool() as pool:
        prompt = list(range(1, 14))  # 13 tokens: 3 full blocks
        first = pool.sequence()
        _, keys, values = prefill(pool, first, prompt)
        table_first = torch.from_dlpack(pool.block_table([first])).clone()
        before = pool.stats(0)
        second = pool.sequence()
        matched = second.match_prefix(prompt)
        assert matched == 12 and second.committed == 12 and len(second) == 12
        after = pool.stats(0)
        assert after.prefix_hits - before.prefix_hits == 3
        assert after.used_blocks == before.used_blocks  # nothing new: the blocks are shared
        table_second = torch.from_dlpack(pool.block_table([second]))
        assert torch.equal(table_second[0, :3], table_first[0, :3])
        second.reserve(prompt[matched:])
        k, v = second.gather(0)
        assert torch.equal(as_token_major(k)[:12], keys[0][:12])
        # another prompt shares the first two blocks only
        third = pool.sequence()
        assert third.match_prefix(prompt[:8] + [99] * 6) == 8
        for s in (first, second, third):
            s.close()


def test_released_blocks_stay_cached_until_evicted_and_salts_separate_tenants():
    with make_pool(num_blocks=8) as pool:  # 7 usable blocks
        prompt = list(range(9))  # 2 full blocks + 1 partial
        with pool.sequence(salt=b"tenant-a") as seq:
            prefill(pool, seq, prompt)
        s = pool.stats(0)
        assert s.used_blocks == 0 and s.cached_blocks == 2 and s.free_blocks == 5
        with pool.sequence(salt=b"tenant-b") as other:
            assert other.match_prefix(prompt) == 0
        with pool.sequence(salt=b"tenant-a") as same:
            assert same.match_prefix(prompt) == 8
        # filling the pool evicts the cached blocks (least recently used first)
        with pool.sequence() as big:
            big.reserve(list(range(1000, 1000 + 7 * BLOCK)))
            assert pool.stats(0).evictions == 2
        with pool.sequence(salt=b"tenant-a") as again:
            assert again.match_prefix(prompt) == 0


def test_pinned_blocks_survive_eviction_until_unpinned():
    with make_pool(num_blocks=8) as pool:
        system = list(range(8))
        with pool.sequence() as seq:
            prefill(pool, seq, system)
            seq.pin()
        assert pool.stats(0).pinned_blocks == 2
        with pool.sequence() as big:
            with pytest.raises(kvcache.OutOfMemoryError):
                big.reserve(list(range(100, 100 + 7 * BLOCK)))  # 7 blocks: only 5 are not pinned
        with pool.sequence() as seq:
            assert seq.match_prefix(system + [1]) == 8
        pool.unpin_all()
        assert pool.stats(0).pinned_blocks == 0


def test_prefix_caching_off_never_hashes():
    with make_pool(prefix_caching=False) as pool:
        with pool.sequence() as seq:
            prefill(pool, seq, list(range(9)))
        assert pool.stats(0).cached_blocks == 0 and pool.events() == []
        with pool.sequence() as seq:
            assert seq.match_prefix(list(range(9))) == 0


# ----------------------------------------------------------- fork, copy-on-write


def test_fork_and_copy_on_write_keep_the_bytes():
    with make_pool() as pool:
        parent = pool.sequence()
        _, keys, values = prefill(pool, parent, list(range(6)))  # 1 full block + 2 tokens in a partial one
        child = parent.fork()
        assert len(child) == 6 and child.committed == 6
        t_parent = torch.from_dlpack(pool.block_table([parent])).clone()
        t_child = torch.from_dlpack(pool.block_table([child])).clone()
        assert torch.equal(t_parent, t_child)  # every block shared
        # the child writes its next token: the shared partial block is copied first
        slots = child.reserve([42])
        assert slots.group(0)[0] // BLOCK != t_parent[0, 1].item()
        k1, v1 = step_kv(1, start=0.25)
        pool.write(k1, v1, slots)
        child.commit()
        # the parent writes a different token into its own (now unshared) partial block
        slots_p = parent.reserve([43])
        assert slots_p.group(0)[0] // BLOCK == t_parent[0, 1].item()
        k2, v2 = step_kv(1, start=0.75)
        pool.write(k2, v2, slots_p)
        parent.commit()
        for layer in range(pool.num_layers):
            kc, vc = child.gather(layer)
            kp, vp = parent.gather(layer)
            assert torch.equal(as_token_major(kc), torch.cat([keys[layer], k1[layer]]))
            assert torch.equal(as_token_major(vc), torch.cat([values[layer], v1[layer]]))
            assert torch.equal(as_token_major(kp), torch.cat([keys[layer], k2[layer]]))
            assert torch.equal(as_token_major(vp), torch.cat([values[layer], v2[layer]]))
        child.close()
        parent.close()


def test_truncate_rolls_back_and_blocks_needed_counts_ahead():
    with make_pool() as pool, pool.sequence() as seq:
        _, keys, _ = prefill(pool, seq, list(range(10)))
        assert pool.blocks_needed([seq], [2]) == [0]  # fits the partial block
        assert pool.blocks_needed([seq], 3) == [1]
        used = pool.stats(0).used_blocks
        seq.truncate(5)
        assert len(seq) == 5 and seq.committed == 5 and pool.stats(0).used_blocks == used - 1
        k, _ = seq.gather(0)
        assert torch.equal(as_token_major(k), keys[0][:5])
        with pytest.raises(kvcache.OutOfRangeError) as e:
            seq.truncate(6)
        assert "6" in str(e.value) and len(seq) == 5


# ------------------------------------------------------------------------ views


def test_block_table_views_padded_and_csr():
    with make_pool() as pool:
        a, b = pool.sequence(), pool.sequence()
        sa = a.reserve(list(range(9)))   # 3 blocks, last holds 1 token
        sb = b.reserve(list(range(4)))   # 1 block, full
        blocks_a = list(dict.fromkeys(s // BLOCK for s in sa.group(0)))
        blocks_b = [sb.group(0)[0] // BLOCK]
        padded = pool.block_table([a, b])
        assert padded.dtype == "int32" and padded.shape == (2, 3) and padded.device == ("cpu", 0)
        t = torch.from_dlpack(padded)
        assert t.data_ptr() == padded.data_ptr  # zero-copy
        assert t.tolist() == [blocks_a, blocks_b + [0, 0]]
        csr = pool.block_table_csr([a, b])
        assert isinstance(csr, kvcache.CsrBlockTable)
        assert torch.from_dlpack(csr.indptr).tolist() == [0, 3, 4]
        assert torch.from_dlpack(csr.indices).tolist() == blocks_a + blocks_b
        assert torch.from_dlpack(csr.last_page_len).tolist() == [1, 4]
        a.close()
        b.close()


def test_table_views_go_stale_and_storage_views_do_not():
    with make_pool() as pool, pool.sequence() as seq:
        seq.reserve([1, 2, 3])
        table = pool.block_table([seq])
        storage_k, storage_v = pool.layer_storage(0)
        slots = seq.reserve([4])
        assert not table.is_valid  # the reserve changed the tables
        with pytest.raises(kvcache.StaleViewError):
            torch.from_dlpack(table)
        table = pool.block_table([seq])
        keys, values = step_kv(1)
        pool.write(keys, values, slots)  # a write changes stored K/V only: table views stay valid
        assert table.is_valid
        torch.from_dlpack(table)
        seq.commit()
        assert not table.is_valid
        assert storage_k.is_valid and storage_v.is_valid
        # a table stays valid until the next table of the same group and format
        padded = pool.block_table([seq])
        csr = pool.block_table_csr([seq])
        assert padded.is_valid and csr.indices.is_valid
        again = pool.block_table([seq])
        assert not padded.is_valid and again.is_valid and csr.indices.is_valid
        torch.from_dlpack(storage_k)
    assert not storage_k.is_valid
    with pytest.raises(kvcache.StaleViewError):
        torch.from_dlpack(storage_k)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_layer_storage_in_both_layouts_is_zero_copy(layout):
    with make_pool(layout=layout) as pool, pool.sequence() as seq:
        slots, keys, values = prefill(pool, seq, list(range(6)))
        nhd = pool.layer_storage(1, "NHD")
        hnd = pool.layer_storage(1, "HND")
        assert nhd.keys.shape == (16, BLOCK, HEADS, DIM) and hnd.keys.shape == (16, HEADS, BLOCK, DIM)
        assert nhd.values.shape == (16, BLOCK, HEADS, VDIM) and hnd.values.shape == (16, HEADS, BLOCK, VDIM)
        assert nhd.keys.data_ptr == hnd.keys.data_ptr
        k_nhd, k_hnd = torch.from_dlpack(nhd.keys), torch.from_dlpack(hnd.keys)
        v_nhd = torch.from_dlpack(nhd.values)
        assert k_nhd.data_ptr() == nhd.keys.data_ptr
        assert (k_nhd.is_contiguous(), k_hnd.is_contiguous()) == ((True, False) if layout == "NHD" else (False, True))
        for i, slot in enumerate(slots.group(0)):
            block, offset = divmod(slot, BLOCK)
            assert torch.equal(k_nhd[block, offset], keys[1][i])
            assert torch.equal(k_hnd[block, :, offset], keys[1][i])
            assert torch.equal(v_nhd[block, offset], values[1][i])
        # the storage is the pool's memory: a write shows through the tensors exported before
        k1, v1 = step_kv(1, start=0.5)
        s = seq.reserve([6])
        pool.write(k1, v1, s)
        block, offset = divmod(s.group(0)[0], BLOCK)
        assert torch.equal(k_nhd[block, offset], k1[1][0])


def test_exported_tensors_keep_the_pool_alive():
    pool = make_pool()
    seq = pool.sequence()
    slots, keys, _ = prefill(pool, seq, list(range(4)))
    k = torch.from_dlpack(pool.layer_storage(0).keys)
    block, offset = divmod(slots.group(0)[0], BLOCK)
    del seq
    pool.close()
    del pool
    gc.collect()
    assert torch.equal(k[block, offset], keys[0][0])  # still readable: the tensor holds the memory


# ------------------------------------------------------------- hybrid models


def hybrid_pool():
    return kvcache.Pool(dtype=torch.float32,
                        groups=[kvcache.PoolGroup("full", block_size=BLOCK, num_blocks=16),
                                kvcache.PoolGroup("recurrent", block_size=BLOCK, num_blocks=8)],
                        layers=[kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM),
                                kvcache.PoolLayer(group=1, num_kv_heads=2, head_dim=3, conv_dim=5, conv_kernel=4,
                                                  ssm_state_size=6)])


def hybrid_step(pool, seq, tokens, fill):
    slots = seq.reserve(tokens)
    assert slots.group(1).tolist() == [-1] * len(tokens)  # recurrent groups take no slots
    keys = [torch.full((len(tokens), HEADS, DIM), fill), None]
    pool.write(keys, keys, slots)
    conv, ssm = seq.recurrent_state(1)
    assert conv.shape == (1, 5, 4) and ssm.shape == (1, 2, 3, 6)
    torch.from_dlpack(conv).fill_(fill)  # the model writes its state in place
    torch.from_dlpack(ssm).fill_(-fill)
    seq.commit()


def test_recurrent_checkpoints_make_prefix_reuse_work_for_hybrid_models():
    with hybrid_pool() as pool:
        prompt = list(range(20, 33))
        with pool.sequence() as seq:
            hybrid_step(pool, seq, prompt[:4], 1.0)   # checkpoint at 4
            hybrid_step(pool, seq, prompt[4:8], 2.0)  # checkpoint at 8
            hybrid_step(pool, seq, prompt[8:10], 3.0)  # no block boundary: no checkpoint
            fork = seq.fork()  # the live state is copied
            assert torch.from_dlpack(fork.recurrent_state(1).conv).eq(3.0).all()
            fork.close()
            seq.truncate(8)  # restores the checkpoint at 8
            assert torch.from_dlpack(seq.recurrent_state(1).ssm).eq(-2.0).all()
            with pytest.raises(kvcache.InvalidStateError):
                seq.truncate(6)  # no checkpoint there
            assert len(seq) == 8
        with pool.sequence() as again:
            assert again.match_prefix(prompt) == 8
            conv, ssm = again.recurrent_state(1)
            assert torch.from_dlpack(conv).eq(2.0).all() and torch.from_dlpack(ssm).eq(-2.0).all()
        with pool.sequence() as other:
            assert other.match_prefix(prompt[:6] + [0] * 4) == 4
            assert torch.from_dlpack(other.recurrent_state(1).conv).eq(1.0).all()
        with pytest.raises(kvcache.InvalidArgumentError):
            pool.layer_storage(1)  # a recurrent layer has no K/V storage


def test_tables_of_several_groups_coexist():
    with kvcache.Pool(dtype=torch.float32,
                      groups=[kvcache.PoolGroup("full", block_size=BLOCK, num_blocks=16),
                              kvcache.PoolGroup("sliding", block_size=2, num_blocks=16, window=4)],
                      layers=[kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM),
                              kvcache.PoolLayer(group=1, num_kv_heads=HEADS, head_dim=DIM)]) as pool:
        with pool.sequence() as seq:
            slots = seq.reserve(list(range(6)))
            full = pool.block_table([seq], group=0)
            sliding = pool.block_table([seq], group=1)
            assert full.is_valid and sliding.is_valid
            assert torch.from_dlpack(full).tolist() == [list(dict.fromkeys(s // BLOCK for s in slots.group(0)))]
            assert torch.from_dlpack(sliding).tolist() == [list(dict.fromkeys(s // 2 for s in slots.group(1)))]


def test_sliding_groups_free_blocks_that_leave_the_window():
    with kvcache.Pool(dtype=torch.float32, groups=[kvcache.PoolGroup("sliding", block_size=BLOCK, num_blocks=16,
                                                                      window=6)],
                      layers=[kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM)]) as pool:
        with pool.sequence() as seq:
            seq.reserve(list(range(17)))
            seq.commit()
            assert pool.stats(0).used_blocks == 5  # a prefill's early tokens keep their blocks until committed
            seq.reserve([17])
            table = torch.from_dlpack(pool.block_table([seq])).tolist()[0]
            # token 17 attends to tokens 12..17: blocks 0, 1 and 2 (tokens 0..11) left the window
            assert table[:3] == [0, 0, 0] and 0 not in table[3:] and len(table) == 5
            assert pool.stats(0).used_blocks == 2
            with pytest.raises(kvcache.InvalidStateError) as e:
                seq.gather(0)
            assert "token 0" in str(e.value)


# ------------------------------------------------------------------------ events


def test_events_carry_the_block_hash_chain_of_the_specification():
    seed, salt = b"llama-3-8b", b"tenant-7"
    with make_pool(seed=seed) as pool:
        tokens = [5, 1, 70000, 3, 9, 2, 6, 4, 11, 12]  # 2 full blocks and a partial one
        with pool.sequence(salt=salt) as seq:
            prefill(pool, seq, tokens)
        events = pool.events()
        root = kvcache.block_hash_root(seed, salt)
        hashes = kvcache.block_hash_chain(root, tokens, BLOCK)
        chain = list(zip(hashes, [root] + hashes[:-1]))
        assert [e.kind for e in events] == [kvcache.EventKind.BLOCK_STORED] * 2
        assert [e.id for e in events] == [1, 2]
        assert [(e.block_hash, e.parent_hash) for e in events] == chain
        assert events[0].parent_hash == root
        assert all(e.group == 0 and e.num_tokens == BLOCK and e.block_id > 0 for e in events)
        assert pool.events() == []  # pulled events leave the queue
        # eviction reports the hash that is no longer found; clear_cache reports itself
        with pool.sequence() as big:
            big.reserve(list(range(100, 100 + 15 * BLOCK)))
        removed = pool.events()
        assert [e.kind for e in removed] == [kvcache.EventKind.BLOCK_REMOVED] * 2
        assert sorted(e.block_hash for e in removed) == sorted(h for h, _ in chain)
        assert removed[0].parent_hash is None and removed[0].num_tokens is None
        pool.clear_cache()
        cleared = pool.events()
        assert [e.kind for e in cleared] == [kvcache.EventKind.ALL_CLEARED]
        assert cleared[0].block_hash is None and cleared[0].id == removed[-1].id + 1


def test_a_full_event_queue_drops_the_oldest():
    with make_pool(events=2) as pool, pool.sequence() as seq:
        prefill(pool, seq, list(range(4 * BLOCK)))
        ids = [e.id for e in pool.events()]
        assert ids == [3, 4]


# ------------------------------------------------------------------------- files


def test_a_saved_sequence_loads_into_a_fresh_pool_with_its_bytes_and_cached_prefix(tmp_path):
    tokens = list(range(300, 311))  # 11 tokens: 2 full blocks and a partial one
    with make_pool() as a, make_pool() as b, a.sequence() as seq:
        prefill(a, seq, tokens[:6])
        prefill(a, seq, tokens[6:], start=0.25)
        path = tmp_path / "seq.kvc"
        seq.save(path)
        chunks = []
        seq.save_to(chunks.append)
        assert b"".join(chunks) == path.read_bytes()
        loaded, from_bytes = b.load_sequence(path), b.load_sequence_buffer(bytearray(path.read_bytes()))
        for copy in (loaded, from_bytes):
            assert (len(copy), copy.committed) == (11, 11) and copy.pool is b
            for layer in range(a.num_layers):
                k0, v0 = seq.gather(layer)
                k1, v1 = copy.gather(layer)
                assert torch.equal(k0, k1) and torch.equal(v0, v1)
        with b.sequence() as request:  # the loaded committed full blocks are cached in the new pool
            assert request.match_prefix(tokens) == 8
        # both keep stepping alike
        for s, p in ((seq, a), (loaded, b)):
            prefill(p, s, [400, 401], start=0.5)
        assert len(loaded) == 13
        for layer in range(a.num_layers):
            assert torch.equal(seq.gather(layer).keys, loaded.gather(layer).keys)
        loaded.close()
        from_bytes.close()
        assert b.stats(0).used_blocks == 0


def test_a_pool_of_another_layout_or_without_room_refuses_a_sequence_file_and_is_unchanged(tmp_path):
    wider = kvcache.Pool(dtype=torch.float32, groups=[kvcache.PoolGroup("full", block_size=2 * BLOCK, num_blocks=16)],
                         layers=[kvcache.PoolLayer(group=0, num_kv_heads=HEADS, head_dim=DIM, value_head_dim=VDIM)]
                         * 2, hash_seed=b"test-model")
    with make_pool() as a, wider, make_pool(num_blocks=3) as small, a.sequence() as seq:
        prefill(a, seq, list(range(11)))
        path = tmp_path / "seq.kvc"
        seq.save(path)
        for pool, error, words in ((wider, kvcache.InvalidArgumentError, r"group 0: block_size 4 \(file\) vs 8 \(pool\)"),
                                   (small, kvcache.OutOfMemoryError, "group 0"),
                                   (make_pool(seed=b"other-model"), kvcache.InvalidArgumentError, "hash")):
            before = pool.stats(0)
            with pytest.raises(error, match=words):
                pool.load_sequence(path)
            assert pool.stats(0) == before
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x40
        before = a.stats(0)
        with pytest.raises(kvcache.IoError) as e:
            a.load_sequence_buffer(data)
        assert isinstance(e.value, OSError)
        with pytest.raises(kvcache.IoError, match="cannot open"):
            a.load_sequence(tmp_path / "missing.kvc")
        assert a.stats(0) == before and (len(seq), seq.committed) == (11, 11)
        with pytest.raises(kvcache.IoError):
            seq.save(tmp_path / "no-such-dir" / "seq.kvc")

        def refuse(chunk):
            raise RuntimeError("the sink is full")
        with pytest.raises(RuntimeError, match="the sink is full"):
            seq.save_to(refuse)
        with pytest.raises(TypeError):
            a.load_sequence_buffer("not bytes")
    seq2 = make_pool().sequence()
    seq2.close()
    with pytest.raises(ValueError, match="sequence is closed"):
        seq2.save(tmp_path / "closed.kvc")


# ------------------------------------------------------------------------ errors


def snapshot(pool, *seqs):
    return pool.stats(0), [(len(s), s.committed) for s in seqs]


def test_out_of_blocks_is_a_memory_error_and_changes_nothing():
    with make_pool(num_blocks=4) as pool, pool.sequence() as seq:  # 3 usable blocks
        seq.reserve([1, 2, 3, 4, 5])
        before = snapshot(pool, seq)
        with pytest.raises(kvcache.OutOfMemoryError) as e:
            seq.reserve(list(range(10)))
        assert isinstance(e.value, MemoryError)
        assert "group 0" in str(e.value) and "needs 2 more blocks" in str(e.value)
        assert snapshot(pool, seq) == before


def test_bad_input_names_the_value_and_changes_nothing():
    with make_pool() as pool, pool.sequence() as seq:
        seq.reserve([1, 2, 3])
        before = snapshot(pool, seq)
        with pytest.raises(kvcache.InvalidArgumentError) as e:
            seq.reserve([4, -5, 6])
        assert "tokens[1] is -5" in str(e.value)
        with pytest.raises(kvcache.InvalidArgumentError) as e:
            seq.reserve([2**31])
        assert str(2**31) in str(e.value) and "tokens[0]" in str(e.value)
        with pytest.raises(kvcache.InvalidArgumentError):
            seq.reserve([])
        with pytest.raises(kvcache.InvalidArgumentError) as e:
            seq.match_prefix([1, 2])  # not empty
        assert snapshot(pool, seq) == before
        keys, values = step_kv(1)
        with pytest.raises(kvcache.InvalidArgumentError) as e:
            pool.write(keys, values, [10_000])
        assert "is 10000" in str(e.value)
        with pytest.raises(kvcache.InvalidArgumentError) as e:
            pool.write(keys[:1], values[:1], [0])
        assert "2 layers" in str(e.value)
        with pytest.raises(kvcache.ShapeMismatchError):
            pool.write([k[:, :1] for k in keys], values, seq.reserve([7]))
        with pytest.raises(kvcache.OutOfRangeError):
            pool.layer_storage(2)
        with pytest.raises(kvcache.OutOfRangeError):
            pool.block_table([seq], group=3)
        with pytest.raises(kvcache.OutOfRangeError):
            pool.stats(1)


@pytest.mark.parametrize("field, value, name", [
    ("block_size", 0, "block_size"), ("num_blocks", 1, "num_blocks"), ("kind", 9, "kind")])
def test_bad_options_name_the_field(field, value, name):
    group = dict(kind="full", block_size=BLOCK, num_blocks=8)
    group[field] = value
    with pytest.raises(kvcache.InvalidArgumentError) as e:
        kvcache.Pool(dtype="float32", groups=[kvcache.PoolGroup(**group)],
                     layers=[kvcache.PoolLayer(group=0, num_kv_heads=1, head_dim=4)])
    assert name in str(e.value)
    with pytest.raises(kvcache.InvalidArgumentError) as e:
        kvcache.Pool(dtype="float32", groups=[kvcache.PoolGroup("full", block_size=4, num_blocks=8)],
                     layers=[kvcache.PoolLayer(group=1, num_kv_heads=1, head_dim=4)])
    assert "group" in str(e.value)
    with pytest.raises(kvcache.InvalidArgumentError) as e:
        kvcache.PoolGroup("diagonal")._to_lib(0)
    assert "'diagonal'" in str(e.value)


def test_sequences_of_another_pool_are_refused():
    with make_pool() as p1, make_pool() as p2, p1.sequence() as s1, p2.sequence() as s2:
        s1.reserve([1])
        s2.reserve([1])
        with pytest.raises(kvcache.InvalidArgumentError) as e:
            p1.block_table([s1, s2])
        assert "sequences[1]" in str(e.value)
        with pytest.raises(kvcache.InvalidArgumentError):
            p1.blocks_needed([s2], [1])


# --------------------------------------------------------------------- lifetimes


def test_context_managers_release_blocks():
    with make_pool() as pool:
        with pool.sequence() as seq:
            seq.reserve(list(range(7)))
            assert pool.stats(0).used_blocks == 2
        assert seq.closed and pool.stats(0).used_blocks == 0
    assert pool.closed


def test_closing_twice_and_use_after_close_are_safe():
    pool = make_pool()
    seq = pool.sequence()
    seq.reserve([1, 2])
    seq.close()
    seq.close()
    with pytest.raises(ValueError, match="sequence is closed"):
        seq.reserve([3])
    with pytest.raises(ValueError, match="sequence is closed"):
        len(seq)
    other = pool.sequence()
    other.reserve([1])
    table = pool.block_table([other])
    pool.close()
    pool.close()
    assert pool.closed and other.closed and not table.is_valid
    with pytest.raises(ValueError, match="pool is closed"):
        other.reserve([2])
    with pytest.raises(ValueError, match="pool is closed"):
        pool.sequence()
    with pytest.raises(ValueError, match="pool is closed"):
        pool.stats(0)
    other.close()  # after the pool: nothing to do
    assert "closed" in repr(pool) and "closed" in repr(other)


def test_dropped_sequences_release_their_blocks():
    with make_pool() as pool:
        seq = pool.sequence()
        seq.reserve(list(range(5)))
        forked = seq.fork()
        assert pool.stats(0).used_blocks == 2
        del seq, forked
        gc.collect()
        assert pool.stats(0).used_blocks == 0


def test_a_second_thread_is_refused_and_a_sequence_it_drops_waits_for_the_call():
    import threading
    import time
    n = 16 * 2000
    with kvcache.Pool(dtype=torch.float32, groups=[kvcache.PoolGroup("full", block_size=16, num_blocks=2002)],
                      layers=[kvcache.PoolLayer(group=0, num_kv_heads=4, head_dim=64)]) as pool:
        big = pool.sequence()
        slots = big.reserve(list(range(n)))
        holder = [pool.sequence()]
        holder[0].reserve([1])
        keys = [torch.ones(n, 4, 64)]
        outcome = {}
        stop = threading.Event()

        def other():
            while not stop.is_set():
                try:
                    pool.stats(0)  # microseconds: a write (milliseconds) is most likely running meanwhile
                except kvcache.BusyError as e:  # the writer is inside the pool, the GIL released
                    outcome["refused"] = str(e)
                    holder.clear()  # the last reference: destroyed at the pool's next call
                    return
                time.sleep(0.0002)

        th = threading.Thread(target=other)
        th.start()
        deadline = time.monotonic() + 20
        while "refused" not in outcome and time.monotonic() < deadline:
            try:
                pool.write(keys, keys, slots)
            except kvcache.BusyError:
                pass  # the other thread was inside (a query): the rule holds both ways
        stop.set()
        th.join()
        pool.write(keys, keys, slots)  # the pool's next call: the dropped sequence is destroyed
        assert "another thread" in outcome.get("refused", ""), outcome
        assert pool.stats(0).used_blocks == n // 16  # the dropped sequence's block went back
        big.close()


def test_no_leak_over_many_pools_and_sequences():
    import tracemalloc
    tokens = list(range(9))

    def cycle():
        with make_pool(num_blocks=8, events=4) as pool:
            for _ in range(4):
                with pool.sequence() as seq:
                    prefill(pool, seq, tokens)
                    child = seq.fork()
                    child.reserve([1])
                    torch.from_dlpack(pool.block_table([seq, child]))
                    pool.events()
                    try:
                        child.reserve([-1])
                    except kvcache.InvalidArgumentError:
                        pass

    for _ in range(50):
        cycle()
    gc.collect()
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    for _ in range(300):
        cycle()
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in snap1.compare_to(snap0, "filename"))
    assert grown < 64 * 1024, grown


# ------------------------------------------------------------------ description


def test_describe_config_from_a_transformers_config():
    transformers = pytest.importorskip("transformers", reason="SKIPPED: describe_config's test needs transformers")
    cfg = transformers.Gemma2Config(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                    hidden_size=64, intermediate_size=64, sliding_window=32, vocab_size=128)
    groups, layers = kvcache.describe_config(cfg, num_blocks={"sliding": 8, "full": 16}, block_size=BLOCK)
    types = list(cfg.layer_types)
    kinds = [g.kind for g in groups]
    assert set(kinds) == {"sliding", "full"}
    assert [kinds[lay.group] for lay in layers] == [t.split("_")[0] for t in types]
    assert all((lay.num_kv_heads, lay.head_dim) == (2, 16) for lay in layers)
    sliding = groups[kinds.index("sliding")]
    assert (sliding.window, sliding.num_blocks, sliding.block_size) == (32, 8, BLOCK)
    with kvcache.Pool.from_config(cfg, dtype=torch.float32, num_blocks={"sliding": 8, "full": 16},
                                  block_size=BLOCK) as pool:
        assert pool.num_layers == 4 and pool.num_groups == 2
        with pool.sequence() as seq:
            slots = seq.reserve(list(range(6)))
            assert slots.num_groups == 2
    llama = transformers.LlamaConfig(num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=8,
                                     hidden_size=256, intermediate_size=64, vocab_size=128)
    groups, layers = kvcache.describe_config(llama, num_blocks=64)
    assert [g.kind for g in groups] == ["full"] and len(layers) == 3 and layers[0].head_dim == 32
    with pytest.raises(kvcache.InvalidArgumentError) as e:
        kvcache.describe_config(dict(layer_types=["full_attention", "mamba"], num_attention_heads=2, head_dim=4),
                                num_blocks=8)
    assert "layer_types[1]" in str(e.value) and "'mamba'" in str(e.value)

//! The Redis tier from Rust: two pools with their own connections share a
//! prompt's prefix through a redis-server the test starts on 127.0.0.1 (the
//! second pool's prefix comes from Redis and gathers the same values), the
//! tier's counters, and refused options. Skipped, saying why, where
//! redis-server is not installed (scripts/setup.sh installs it).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod common;

use common::{commit_tokens, per_layer};
use kvcache::{DType, ErrorCode, Pool, PoolGroup, PoolLayer, RedisCluster, RedisTierOptions};

const BLOCK: u32 = 4;
const HEADS: u32 = 2;
const DIM: u32 = 8;

struct Server {
    child: Child,
    addr: String,
    _dir: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

fn start_redis() -> Option<Server> {
    let port = TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let dir = std::env::temp_dir().join(format!("kvc-rust-redis-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let child = match Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--logfile", "", "--dir"])
        .arg(&dir)
        .stdout(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(_) => {
            eprintln!("SKIPPED: redis-server is not installed (scripts/setup.sh installs it)");
            let _ = std::fs::remove_dir_all(&dir);
            return None;
        }
    };
    let addr = format!("127.0.0.1:{port}");
    let server = Server {
        child,
        addr,
        _dir: dir,
    };
    for _ in 0..250 {
        if TcpStream::connect(&server.addr).is_ok() {
            return Some(server);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server did not start on {}", server.addr);
}

fn pool() -> Pool {
    Pool::builder(DType::F32)
        .group(PoolGroup::full(BLOCK, 16))
        .layers(std::iter::repeat_n(PoolLayer::attention(0, HEADS, DIM), 2))
        .hash_seed(b"redis-rust-model")
        .build()
        .expect("a pool")
}

#[test]
fn two_pools_share_a_prefix_through_redis() {
    let Some(server) = start_redis() else { return };
    let (writer, reader) = (pool(), pool());
    let options = RedisTierOptions::new([server.addr.as_str()]).key_prefix("rs:");
    assert_eq!(writer.add_redis_tier(&options).unwrap(), 0);
    assert_eq!(
        reader
            .add_redis_tier(&options.clone().cluster(RedisCluster::Off))
            .unwrap(),
        0
    );
    let tokens: Vec<i32> = (40..53).collect(); // three full blocks and one token more
    let data = per_layer(2, tokens.len() * (HEADS * DIM) as usize, |l, i| {
        (l * 10000 + i) as f32 + 0.5
    });
    {
        let mut seq = writer.sequence().unwrap();
        commit_tokens(&writer, &mut seq, &tokens, &data, HEADS, DIM);
    }
    assert_eq!(writer.tier_stats(0).unwrap().puts, 3);
    let mut seq = reader.sequence().unwrap();
    assert_eq!(seq.match_prefix(&tokens).unwrap(), 12); // nothing in the reader's memory: all from Redis
    let stats = reader.tier_stats(0).unwrap();
    assert_eq!((stats.hits, stats.corrupt), (3, 0));
    assert!(stats.bytes_read > 0);
    for (layer, d) in data.iter().enumerate() {
        let (k, v) = seq.gather::<f32>(layer as u32).unwrap();
        // gather is [1, heads, 12, dim]; what was written is token-major [n, heads, dim].
        for h in 0..HEADS as usize {
            for t in 0..12 {
                for e in 0..DIM as usize {
                    let want = d[(t * HEADS as usize + h) * DIM as usize + e];
                    assert_eq!(k[(h * 12 + t) * DIM as usize + e], want);
                    assert_eq!(v[(h * 12 + t) * DIM as usize + e], want);
                }
            }
        }
    }
    assert_eq!(
        reader.tier_stats(1).unwrap_err().code(),
        ErrorCode::OutOfRange
    );
}

#[test]
fn refused_options_leave_the_pool_without_a_tier() {
    let Some(server) = start_redis() else { return };
    let pool = pool();
    let cases = [
        (RedisTierOptions::new(["localhost"]), "not host:port"),
        (
            RedisTierOptions::new([server.addr.as_str()]).key_prefix("{x}"),
            "hash tag",
        ),
        (
            RedisTierOptions::new([server.addr.as_str()]).ttl(Duration::from_millis(1500)),
            "whole seconds",
        ),
        (
            RedisTierOptions::new([server.addr.as_str()]).cluster(RedisCluster::On),
            "cluster support disabled",
        ),
        (RedisTierOptions::new(["127.0.0.1:1"]), "refused"),
        (
            RedisTierOptions::new([server.addr.as_str()]).call_timeout(Duration::from_micros(10)),
            "call_timeout is 10",
        ),
    ];
    for (options, want) in cases {
        let err = pool.add_redis_tier(&options).unwrap_err();
        assert!(err.to_string().contains(want), "{options:?}: {err}");
    }
    assert_eq!(pool.tier_count(), 0);
}

/// call_timeout reaches the library: a server that accepts and never
/// answers ends creation at the call's deadline (150 ms), not after the
/// command timeout (5 s). Needs no redis-server.
#[test]
fn call_timeout_bounds_creation() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap(); // never accepted: commands go unanswered
    let addr = silent.local_addr().unwrap().to_string();
    let options = RedisTierOptions::new([addr.as_str()])
        .command_timeout(Duration::from_secs(5))
        .call_timeout(Duration::from_millis(150));
    let start = std::time::Instant::now();
    let err = pool().add_redis_tier(&options).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Io);
    assert!(err.to_string().contains("call_timeout_ms 150"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

/// A reply of the server: a bulk string, an array, or a status line.
#[derive(Debug)]
enum Reply {
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
    Line(String),
}

fn read_reply(r: &mut BufReader<TcpStream>) -> Reply {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let line = line.trim_end().to_string();
    match line.as_bytes()[0] {
        b'$' => {
            let n: i64 = line[1..].parse().unwrap();
            if n < 0 {
                return Reply::Bulk(None);
            }
            let mut b = vec![0u8; n as usize + 2];
            r.read_exact(&mut b).unwrap();
            b.truncate(n as usize);
            Reply::Bulk(Some(b))
        }
        b'*' => Reply::Array(
            (0..line[1..].parse::<usize>().unwrap())
                .map(|_| read_reply(r))
                .collect(),
        ),
        _ => Reply::Line(line),
    }
}

/// One command over RESP, as any client of the server could send it.
fn command(addr: &str, args: &[&[u8]]) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    s.write_all(&out).unwrap();
    read_reply(&mut BufReader::new(s))
}

fn bulk(r: Reply) -> Vec<u8> {
    match r {
        Reply::Bulk(Some(b)) => b,
        other => panic!("expected a value, got {other:?}"),
    }
}

#[test]
fn an_authenticated_redis_tier_refuses_what_it_did_not_write() {
    let Some(server) = start_redis() else { return };
    let (key_a, key_b) = (
        b"a redis tier key, 32 bytes long." as &[u8],
        b"another tier key of 32 bytes...." as &[u8],
    );
    let tokens: Vec<i32> = (70..83).collect(); // three full blocks and one token more
    let options = |key: Option<&[u8]>| {
        let o = RedisTierOptions::new([server.addr.as_str()]).key_prefix("rs-auth:");
        match key {
            Some(k) => o.auth_key(k),
            None => o,
        }
    };
    let writer = pool();
    writer.add_redis_tier(&options(Some(key_a))).unwrap();
    {
        let mut seq = writer.sequence().unwrap();
        let data = per_layer(2, tokens.len() * (HEADS * DIM) as usize, |_, i| i as f32);
        commit_tokens(&writer, &mut seq, &tokens, &data, HEADS, DIM);
    }
    assert_eq!(writer.tier_stats(0).unwrap().puts, 3);
    let matched = |key: Option<&[u8]>| {
        let reader = pool();
        reader.add_redis_tier(&options(key)).unwrap();
        let mut seq = reader.sequence().unwrap();
        let m = seq.match_prefix(&tokens).unwrap();
        drop(seq);
        let st = reader.tier_stats(0).unwrap();
        (m, st.hits, st.corrupt)
    };
    assert_eq!(matched(Some(key_a)), (12, 3, 0));
    assert_eq!(matched(Some(key_b)), (0, 0, 1));
    assert_eq!(matched(None), (0, 0, 1));
    // A client without the tier's key moves every value under another block's key.
    let Reply::Array(names) = command(&server.addr, &[b"KEYS", b"rs-auth:*"]) else {
        panic!("KEYS")
    };
    let mut names: Vec<Vec<u8>> = names.into_iter().map(bulk).collect();
    names.sort();
    assert_eq!(names.len(), 3);
    let values: Vec<Vec<u8>> = names
        .iter()
        .map(|n| bulk(command(&server.addr, &[b"GET", n])))
        .collect();
    for (i, n) in names.iter().enumerate() {
        let mut forged = values[(i + 1) % 3].clone();
        forged[8..80].copy_from_slice(&values[i][8..80]);
        let reply = command(&server.addr, &[b"SET", n, &forged]);
        assert!(matches!(&reply, Reply::Line(l) if l == "+OK"), "{reply:?}");
    }
    assert_eq!(matched(Some(key_a)), (0, 0, 1));
    let p = pool();
    let err = p.add_redis_tier(&options(Some(b"12345678"))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(
        err.to_string().contains("options.auth_key_len is 8"),
        "{err}"
    );
    assert!(!format!("{:?}", options(Some(key_a))).contains("redis tier key")); // the key stays out of Debug
    assert_eq!(p.tier_count(), 0);
}

#[test]
fn a_redis_tier_by_key_and_in_a_pool() {
    let Some(server) = start_redis() else { return };
    let builder = || {
        Pool::builder(DType::F32)
            .group(PoolGroup::full(BLOCK, 16))
            .layers(std::iter::repeat_n(PoolLayer::attention(0, HEADS, DIM), 2))
            .hash_seed(b"rust-redis-keys")
    };
    let fp = builder().fingerprint().unwrap();
    let (size, layers) = builder().block_payload(0).unwrap();
    let tokens: Vec<i32> = (700..709).collect(); // two full blocks and one token
    let root = kvcache::block_hash_root(b"rust-redis-keys", b"").unwrap();
    let keys: Vec<kvcache::TierKey> = kvcache::block_hash_chain(&root, &tokens, BLOCK)
        .unwrap()
        .into_iter()
        .map(|h| kvcache::TierKey {
            fingerprint: fp,
            block_hash: h,
            group: 0,
        })
        .collect();
    let options = RedisTierOptions::new([server.addr.as_str()]).key_prefix("rustkeys:");
    let mut tier = kvcache::RedisTier::new(&options).unwrap();
    use kvcache::Tier;
    assert_eq!(tier.exists(&keys).unwrap(), vec![false, false]);
    let payloads: Vec<Vec<u8>> = (0..2u8)
        .map(|i| (0..size).map(|j| (j as u8).wrapping_mul(3) ^ i).collect())
        .collect();
    let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
    assert_eq!(tier.put_blocks(&keys, &refs, layers).unwrap(), 2);
    assert_eq!(tier.exists(&keys).unwrap(), vec![true, true]);
    let mut bufs = vec![vec![0u8; size]; 2];
    let mut views: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
    assert_eq!(
        tier.get_blocks(&keys, &mut views, layers).unwrap(),
        vec![true, true]
    );
    assert_eq!(bufs, payloads);
    let pool = builder().build().unwrap();
    pool.add_tier(
        kvcache::RedisTier::new(&options).unwrap(),
        kvcache::TierWrite::Commit,
    )
    .unwrap();
    let mut seq = pool.sequence().unwrap();
    assert_eq!(seq.match_prefix(&tokens).unwrap(), 8);
    assert_eq!(pool.tier_stats(0).unwrap().hits, 2);
}

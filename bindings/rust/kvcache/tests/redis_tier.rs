//! The Redis tier from Rust: two pools with their own connections share a
//! prompt's prefix through a redis-server the test starts on 127.0.0.1 (the
//! second pool's prefix comes from Redis and gathers the same values), the
//! tier's counters, and refused options. Skipped, saying why, where
//! redis-server is not installed (scripts/setup.sh installs it).

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kvcache::{
    DType, ErrorCode, Pool, PoolGroup, PoolLayer, RedisCluster, RedisTierOptions, TensorRef,
};

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
    let n = tokens.len();
    let shape = [n as i64, i64::from(HEADS), i64::from(DIM)];
    let data: Vec<Vec<f32>> = (0..2)
        .map(|l| {
            (0..n * (HEADS * DIM) as usize)
                .map(|i| (l * 10000 + i) as f32 + 0.5)
                .collect()
        })
        .collect();
    {
        let mut seq = writer.sequence().unwrap();
        let slots = seq.reserve(&tokens).unwrap();
        let kv: Vec<TensorRef<'_>> = data
            .iter()
            .map(|d| TensorRef::new(d, &shape).unwrap())
            .collect();
        writer.write(&kv, &kv, &slots).unwrap();
        seq.commit().unwrap();
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

//! A shared tier of a [`Pool`] on Redis or Valkey (`kvcache/redis_tier.h`,
//! docs/redis-tier.md): the pool stores its blocks there when they are
//! committed (or evicted) and [`Sequence::match_prefix`](crate::Sequence::match_prefix)
//! continues past memory with it, so two processes share a prompt's prefix
//! through Redis. The library speaks RESP itself; a failure of Redis later is
//! a miss, never an error: only [`Pool::add_redis_tier`] reports an
//! unreachable or misconfigured server.
//!
//! ```no_run
//! # use kvcache::{DType, Pool, PoolGroup, PoolLayer, RedisTierOptions};
//! let pool = Pool::builder(DType::F32)
//!     .group(PoolGroup::full(16, 1024))
//!     .layers(std::iter::repeat_n(PoolLayer::attention(0, 8, 128), 32))
//!     .build()?;
//! pool.add_redis_tier(&RedisTierOptions::new(["10.0.0.1:6379", "10.0.0.2:6379"]))?;
//! # Ok::<(), kvcache::Error>(())
//! ```

use std::ffi::CString;
use std::time::Duration;

use crate::error::{Result, check, invalid_argument};
use crate::pool::Pool;
use crate::sys;
use crate::tier::{OwnedTier, Tier, TierSealed, TierWrite};
use std::ptr::NonNull;

/// Whether the servers are a Redis Cluster (`kvc_redis_cluster_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RedisCluster {
    /// Ask the first seed that answers (`CLUSTER SLOTS`).
    #[default]
    Auto,
    /// One standalone server: the first seed that answers.
    Off,
    /// A cluster: refused if the seeds are not one.
    On,
}

/// The options of a Redis tier (`kvc_redis_tier_options`), with the
/// library's defaults; set what differs with the builder methods.
#[derive(Clone, Debug)]
pub struct RedisTierOptions {
    seeds: Vec<String>,
    cluster: RedisCluster,
    key_prefix: String,
    username: Option<String>,
    password: Option<String>,
    connect_timeout: Duration,
    command_timeout: Duration,
    call_timeout: Option<Duration>,
    reconnect_interval: Duration,
    ttl: Duration,
    max_pipeline: u32,
    write: TierWrite,
    auth_key: Option<AuthKey>,
}

/// An authentication key, kept out of `Debug` output.
#[derive(Clone)]
struct AuthKey(Vec<u8>);

impl std::fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes>", self.0.len())
    }
}

impl RedisTierOptions {
    /// Options for the servers at `seeds` (`"host:port"`, `"[::1]:6379"` for IPv6).
    pub fn new<S: Into<String>>(seeds: impl IntoIterator<Item = S>) -> RedisTierOptions {
        RedisTierOptions {
            seeds: seeds.into_iter().map(Into::into).collect(),
            cluster: RedisCluster::Auto,
            key_prefix: "kvc:".into(),
            username: None,
            password: None,
            connect_timeout: Duration::from_millis(50),
            command_timeout: Duration::from_millis(200),
            call_timeout: None,
            reconnect_interval: Duration::from_secs(1),
            ttl: Duration::ZERO,
            max_pipeline: 32,
            write: TierWrite::Commit,
            auth_key: None,
        }
    }
    setters! {
        /// Standalone or cluster (default: ask the server).
        cluster(mode: RedisCluster) => cluster;

        /// The prefix of every key (default `"kvc:"`; no braces).
        key_prefix(prefix: impl Into<String>) => key_prefix = prefix.into();

        /// `AUTH password`.
        password(password: impl Into<String>) => password = Some(password.into());
    }
    /// `AUTH username password` (Redis 6 ACL).
    pub fn auth(mut self, username: impl Into<String>, password: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self.password = Some(password.into());
        self
    }
    setters! {
        /// The longest a TCP connect may take (default 50 ms).
        connect_timeout(d: Duration) => connect_timeout;

        /// The longest a node may stay silent while a call waits on it (default 200 ms).
        command_timeout(d: Duration) => command_timeout;

        /// The deadline of every call into the tier: its creation, and each
        /// store and lookup the pool makes there returns within it, whatever
        /// the servers do (default: connect timeout + 2 x command timeout,
        /// 450 ms). Since 0.7.
        call_timeout(d: Duration) => call_timeout = Some(d);

        /// How long a failed node is left alone before it is tried again (default 1 s).
        reconnect_interval(d: Duration) => reconnect_interval;

        /// `EX` of every SET, whole seconds; zero (the default) = none.
        ttl(d: Duration) => ttl;

        /// Commands in flight on one connection (default 32).
        max_pipeline(n: u32) => max_pipeline;

        /// When the pool stores blocks (default on commit).
        write(policy: TierWrite) => write;

        /// The tier's authentication key (16 to 256 random bytes, the same for
        /// every writer and reader; docs/redis-tier.md). Since 0.7. Without one,
        /// any client that can SET the tier's keys can serve K/V to every pool
        /// reading them; with one, values carry an HMAC-SHA256 and those written
        /// without the key or moved under another key are misses.
        auth_key(key: impl Into<Vec<u8>>) => auth_key = Some(AuthKey(key.into()));
    }
}

fn c_string(name: &str, s: &str) -> Result<CString> {
    CString::new(s)
        .map_err(|_| invalid_argument(format!("add_redis_tier: {name} holds a NUL byte")))
}

fn millis(name: &str, d: Duration) -> Result<u32> {
    u32::try_from(d.as_millis()).map_err(|_| {
        invalid_argument(format!(
            "add_redis_tier: {name} is {d:?}; at most {} ms",
            u32::MAX
        ))
    })
}

/// A Redis or Valkey tier this program holds (`kvc_redis_tier_create`):
/// given to a pool with [`Pool::add_tier`] like a
/// [`DiskTier`](crate::DiskTier), or used by key without a pool
/// ([`Tier::exists`], [`Tier::get_blocks`], [`Tier::put_blocks`]), e.g. from
/// an engine's scheduler. Since 0.7. The options' `write` is not used
/// ([`Pool::add_tier`] takes the policy).
#[derive(Debug)]
pub struct RedisTier {
    owned: OwnedTier,
}

impl RedisTier {
    /// Connects to the seeds (`kvc_redis_tier_create`). Errors: as
    /// [`Pool::add_redis_tier`]'s.
    pub fn new(options: &RedisTierOptions) -> Result<RedisTier> {
        let raw = create(options)?;
        Ok(RedisTier {
            owned: OwnedTier {
                raw: NonNull::new(raw).expect("kvcache: kvc_redis_tier_create returned NULL"),
            },
        })
    }
}

impl TierSealed for RedisTier {}

impl Tier for RedisTier {
    fn as_ptr(&self) -> *mut sys::kvc_tier {
        self.owned.raw.as_ptr()
    }

    fn into_raw(self) -> NonNull<sys::kvc_tier> {
        self.owned.release()
    }
}

/// `kvc_redis_tier_create` of the options: an owned tier.
fn create(options: &RedisTierOptions) -> Result<*mut sys::kvc_tier> {
    let seeds = c_string("seeds", &options.seeds.join(","))?;
    let prefix = c_string("key_prefix", &options.key_prefix)?;
    let username = options
        .username
        .as_deref()
        .map(|u| c_string("username", u))
        .transpose()?;
    let password = options
        .password
        .as_deref()
        .map(|p| c_string("password", p))
        .transpose()?;
    if options.ttl.subsec_nanos() != 0 || options.ttl.as_secs() > u64::from(u32::MAX) {
        return Err(invalid_argument(format!(
            "add_redis_tier: ttl is {:?}; it is whole seconds",
            options.ttl
        )));
    }
    let mut raw = sys::kvc_redis_tier_options::default();
    // SAFETY: fills the struct with its _INIT values.
    unsafe { sys::kvc_redis_tier_options_init(&mut raw) };
    raw.cluster = match options.cluster {
        RedisCluster::Auto => sys::KVC_REDIS_CLUSTER_AUTO,
        RedisCluster::Off => sys::KVC_REDIS_CLUSTER_OFF,
        RedisCluster::On => sys::KVC_REDIS_CLUSTER_ON,
    } as sys::kvc_redis_cluster_mode;
    raw.seeds = seeds.as_ptr();
    raw.key_prefix = prefix.as_ptr();
    raw.username = username.as_ref().map_or(std::ptr::null(), |u| u.as_ptr());
    raw.password = password.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
    raw.connect_timeout_ms = millis("connect_timeout", options.connect_timeout)?;
    raw.command_timeout_ms = millis("command_timeout", options.command_timeout)?;
    raw.call_timeout_ms = match options.call_timeout {
        Some(d) if d < Duration::from_millis(1) => {
            return Err(invalid_argument(format!(
                "add_redis_tier: call_timeout is {d:?}; a deadline is at least 1 ms"
            )));
        }
        Some(d) => millis("call_timeout", d)?,
        None => 0,
    };
    raw.reconnect_interval_ms = millis("reconnect_interval", options.reconnect_interval)?;
    raw.ttl_seconds = options.ttl.as_secs() as u32;
    raw.max_pipeline = options.max_pipeline;
    if let Some(AuthKey(key)) = &options.auth_key {
        raw.auth_key = key.as_ptr();
        raw.auth_key_len = key.len();
    }
    let mut tier = std::ptr::null_mut();
    // SAFETY: the options and their strings are valid for the call.
    check(unsafe { sys::kvc_redis_tier_create(&raw, &mut tier) })?;
    Ok(tier)
}

impl Pool {
    /// Creates a Redis tier (`kvc_redis_tier_create`) and gives it to the
    /// pool after its other tiers (`kvc_pool_add_tier`); returns its index
    /// for [`Pool::tier_stats`]. Errors: `InvalidArgument` naming the
    /// option, `Io` (no seed answered, AUTH refused, no cluster where one
    /// is required) naming the seed and the reason; the pool is unchanged.
    pub fn add_redis_tier(&self, options: &RedisTierOptions) -> Result<u32> {
        let policy = options.write.raw();
        let tier = create(options)?;
        let _held = self.lock();
        let index = self.tier_count_held();
        // SAFETY: a live pool and a tier no pool owns yet; on error the tier stays ours.
        if let Err(e) = check(unsafe { sys::kvc_pool_add_tier(self.as_ptr(), tier, policy) }) {
            // SAFETY: the pool refused it: it is still ours to free.
            unsafe { sys::kvc_tier_destroy(tier) };
            return Err(e);
        }
        Ok(index)
    }

    /// How many tiers the pool has.
    pub fn tier_count(&self) -> u32 {
        let _held = self.lock();
        self.tier_count_held()
    }

    /// [`tier_count`](Self::tier_count) with the pool's lock already held.
    pub(crate) fn tier_count_held(&self) -> u32 {
        let mut n = 0;
        // SAFETY: a live pool, locked; kvc_pool_tier returns NULL past the end.
        while !unsafe { sys::kvc_pool_tier(self.as_ptr(), n) }.is_null() {
            n += 1;
        }
        n
    }
}

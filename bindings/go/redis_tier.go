package kvcache

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unsafe"
)

// RedisCluster says whether a Redis tier's servers are a Redis Cluster
// (kvc_redis_cluster_mode).
type RedisCluster int32

// The modes of kvcache/redis_tier.h.
const (
	RedisClusterAuto RedisCluster = 0 // ask the first seed that answers (CLUSTER SLOTS)
	RedisClusterOff  RedisCluster = 1 // one standalone server: the first seed that answers
	RedisClusterOn   RedisCluster = 2 // a cluster: refused if the seeds are not one
)

// RedisTierOptions configure a pool's Redis tier (kvc_redis_tier_options,
// docs/redis-tier.md). Zero values take the library's defaults.
type RedisTierOptions struct {
	Seeds             []string      // "host:port" of any nodes ("[::1]:6379" for IPv6); at least one
	Cluster           RedisCluster  // default RedisClusterAuto
	KeyPrefix         string        // before every key; "" = "kvc:"; no braces
	Username          string        // AUTH username (ACL); "" = the default user
	Password          string        // AUTH password; "" = no AUTH
	ConnectTimeout    time.Duration // a TCP connect; 0 = 50 ms
	CommandTimeout    time.Duration // the longest a node may stay silent; 0 = 200 ms
	ReconnectInterval time.Duration // a failed node is left alone this long; 0 = 1 s
	TTL               time.Duration // EX of every SET, whole seconds; 0 = none (the server's eviction decides)
	MaxPipeline       uint32        // commands in flight per connection; 0 = 32
	Write             TierWrite     // when the pool stores blocks; default TierWriteOnCommit
	// CallTimeout is the deadline of every call into the tier (since 0.7): AddRedisTier and each store and
	// lookup the pool makes there return within it, whatever the servers do. 0 = ConnectTimeout +
	// 2 x CommandTimeout (450 ms with the defaults).
	CallTimeout time.Duration
	// AuthKey is the tier's authentication key (TierAuthKeyMin to
	// TierAuthKeyMax random bytes, the same for every writer and reader;
	// docs/redis-tier.md); nil = no key, and then any client that can SET
	// the tier's keys can serve K/V to every pool reading them. With a key,
	// values carry an HMAC-SHA256 and those written without it, or moved
	// under another key, are misses. Since 0.7.
	AuthKey []byte
}

// redisTierConfig is RedisTierOptions as the C options hold them.
type redisTierConfig struct {
	seeds, prefix, username, password                     string
	cluster                                               int32
	connectMs, commandMs, reconnectMs, ttlSeconds, pipeln uint32
	callMs                                                uint32 // 0: the library derives it
	write                                                 int32
	authKey                                               []byte
}

func millis(fn, name string, d, def time.Duration) (uint32, error) {
	if d == 0 {
		d = def
	}
	ms := d.Milliseconds()
	if ms < 1 || ms > math.MaxUint32 {
		return 0, newError(CodeInvalidArgument, fmt.Sprintf("%s: %s is %v; it is 1 ms to %d ms", fn, name, d,
			uint32(math.MaxUint32)))
	}
	return uint32(ms), nil
}

func (o *RedisTierOptions) config(fn string) (redisTierConfig, error) {
	c := redisTierConfig{
		seeds: strings.Join(o.Seeds, ","), prefix: o.KeyPrefix, username: o.Username, password: o.Password,
		cluster: int32(o.Cluster), pipeln: o.MaxPipeline, write: int32(o.Write), authKey: o.AuthKey,
	}
	if c.prefix == "" {
		c.prefix = "kvc:"
	}
	if c.pipeln == 0 {
		c.pipeln = 32
	}
	for _, s := range []string{c.seeds, c.prefix, c.username, c.password} {
		if strings.IndexByte(s, 0) >= 0 {
			return c, newError(CodeInvalidArgument, fmt.Sprintf("%s: an option holds a NUL byte", fn))
		}
	}
	var err error
	if c.connectMs, err = millis(fn, "ConnectTimeout", o.ConnectTimeout, 50*time.Millisecond); err != nil {
		return c, err
	}
	if c.commandMs, err = millis(fn, "CommandTimeout", o.CommandTimeout, 200*time.Millisecond); err != nil {
		return c, err
	}
	if c.reconnectMs, err = millis(fn, "ReconnectInterval", o.ReconnectInterval, time.Second); err != nil {
		return c, err
	}
	if o.TTL < 0 || o.TTL%time.Second != 0 || o.TTL/time.Second > math.MaxUint32 {
		return c, newError(CodeInvalidArgument, fmt.Sprintf("%s: TTL is %v; it is whole seconds, 0 or more", fn, o.TTL))
	}
	c.ttlSeconds = uint32(o.TTL / time.Second)
	if o.CallTimeout != 0 {
		if c.callMs, err = millis(fn, "CallTimeout", o.CallTimeout, 0); err != nil {
			return c, err
		}
	}
	return c, nil
}

// AddRedisTier creates a tier on Redis or Valkey (kvc_redis_tier_create)
// and gives it to the pool after its other tiers (kvc_pool_add_tier);
// returns its index for TierStats. The pool stores blocks there and
// MatchPrefix continues past memory with it, so two processes share a
// prompt's prefix through Redis. A failure of Redis later is a miss, never
// an error; only this call reports an unreachable or misconfigured server
// (an *Error naming the seed and the reason).
func (p *Pool) AddRedisTier(opts RedisTierOptions) (_ int, err error) {
	defer p.lock().Unlock()
	defer named(&err, "Pool.AddRedisTier")
	const fn = "AddRedisTier"
	c, err := opts.config(fn)
	if err != nil {
		return 0, err
	}
	index := 0
	err = p.call(false, func(h unsafe.Pointer) error {
		index = cPoolTierCount(h)
		return cPoolAddRedisTier(h, &c)
	})
	return index, err
}

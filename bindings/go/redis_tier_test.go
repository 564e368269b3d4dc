//go:build cgo

package kvcache

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// startRedis runs a redis-server of the test's own on 127.0.0.1 at a free
// port, in a temporary directory, killed at cleanup; skips the test where
// redis-server is not installed (scripts/setup.sh installs it).
func startRedis(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("SKIPPED: redis-server is not installed (scripts/setup.sh installs it)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", t.TempDir(),
		"--save", "", "--appendonly", "no", "--logfile", "")
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for i := 0; i < 250; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("redis-server did not start on %s", addr)
	return ""
}

// Two pools with their own connections share a prompt's prefix through Redis.
func TestRedisTierSharesAPrefix(t *testing.T) {
	addr := startRedis(t)
	writer, reader := mkPool(t, 16, "redis-model"), mkPool(t, 16, "redis-model")
	for _, p := range []*Pool{writer, reader} {
		i, err := p.AddRedisTier(RedisTierOptions{Seeds: []string{addr}, KeyPrefix: "go:", Cluster: RedisClusterOff})
		ok(t, err)
		if i != 0 {
			t.Fatalf("AddRedisTier: index %d, want 0", i)
		}
	}
	tokens := []int32{7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19} // three full blocks and one token more
	s := mkSeq(t, writer, nil)
	_, st := prefillSeq(t, writer, s, tokens, 0.25)
	ws, err := writer.TierStats(0)
	ok(t, err)
	if ws.Puts != 3 {
		t.Fatalf("writer stored %d blocks in Redis, want 3", ws.Puts)
	}
	r := mkSeq(t, reader, nil)
	n, err := r.MatchPrefix(tokens)
	ok(t, err)
	if n != 12 {
		t.Fatalf("MatchPrefix = %d, want 12 (three blocks from Redis)", n)
	}
	rs, err := reader.TierStats(0)
	ok(t, err)
	if rs.Hits != 3 || rs.Corrupt != 0 || rs.BytesRead == 0 {
		t.Fatalf("reader's tier stats %+v, want 3 hits", rs)
	}
	want := newStep(12, 0.25)
	for l := 0; l < pLayers; l++ {
		want.keys[l].Data = st.keys[l].Data[:len(want.keys[l].Data)]
		want.values[l].Data = st.values[l].Data[:len(want.values[l].Data)]
	}
	wantHolds(t, r, want)
	if _, err := reader.TierStats(1); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("TierStats(1): %v, want ErrOutOfRange", err)
	}
}

func TestRedisTierRefusesBadOptions(t *testing.T) {
	addr := startRedis(t)
	p := mkPool(t, 16, "redis-model")
	for _, c := range []struct {
		opts RedisTierOptions
		want string
	}{
		{RedisTierOptions{Seeds: []string{"localhost"}}, "not host:port"},
		{RedisTierOptions{Seeds: []string{addr}, KeyPrefix: "{x}"}, "hash tag"},
		{RedisTierOptions{Seeds: []string{addr}, TTL: 1500 * time.Millisecond}, "whole seconds"},
		{RedisTierOptions{Seeds: []string{addr}, Cluster: RedisClusterOn}, "cluster support disabled"},
		{RedisTierOptions{Seeds: []string{"127.0.0.1:1"}}, "refused"},
		{RedisTierOptions{Seeds: []string{addr}, CallTimeout: -time.Second}, "CallTimeout is -1s"},
	} {
		_, err := p.AddRedisTier(c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("AddRedisTier(%+v): %v, want an error saying %q", c.opts, err, c.want)
		}
	}
	if _, err := p.TierStats(0); err == nil {
		t.Fatal("a refused tier was added to the pool")
	}
}

// CallTimeout reaches the library: a server that accepts and never answers
// ends AddRedisTier at the call's deadline (150 ms), not after the command
// timeout (5 s). Needs no redis-server.
func TestRedisTierCallTimeoutBoundsCreation(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0") // never accepted: commands go unanswered
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	p := mkPool(t, 16, "redis-model")
	start := time.Now()
	_, err = p.AddRedisTier(RedisTierOptions{Seeds: []string{silent.Addr().String()}, CommandTimeout: 5 * time.Second,
		CallTimeout: 150 * time.Millisecond})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeIO || !strings.Contains(err.Error(), "call_timeout_ms 150") {
		t.Fatalf("AddRedisTier against a silent server: %v, want an IO error naming call_timeout_ms 150", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("AddRedisTier took %v; its deadline is 150 ms", d)
	}
}

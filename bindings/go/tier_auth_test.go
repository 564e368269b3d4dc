//go:build cgo

package kvcache

// Authenticated tiers from Go (NewAuthenticatedDiskTier,
// RedisTierOptions.AuthKey): the same key finds the blocks with their
// bytes; another key, no key, or a keyed reader of keyless blocks misses;
// blocks moved under another block's file or Redis key miss; bad keys are
// refused naming the option.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var (
	authKeyA = []byte("a go tier key of 32 bytes, A....")
	authKeyB = []byte("a go tier key of 32 bytes, B....")
)

func authDiskTier(t *testing.T, dir string, key []byte) *DiskTier {
	t.Helper()
	if key == nil {
		return must[*DiskTier](t)(NewDiskTier(dir, 0))
	}
	return must[*DiskTier](t)(NewAuthenticatedDiskTier(dir, 0, key))
}

// authMatch matches prompt in a new pool with a tier on dir: tokens matched and the tier's stats.
func authMatch(t *testing.T, dir string, key []byte, prompt []int32) (int64, TierStats, *Sequence) {
	t.Helper()
	p := mkLayoutPool(t, 16, LayoutNHD)
	ok(t, p.AddTier(authDiskTier(t, dir, key), TierWriteOnCommit))
	s := mkSeq(t, p, nil)
	n := must[int64](t)(s.MatchPrefix(prompt))
	return n, must[TierStats](t)(p.TierStats(0)), s
}

func TestAuthenticatedDiskTierReadsItsOwnKeyOnly(t *testing.T) {
	keyed, keyless := t.TempDir(), t.TempDir()
	prompt := seqTokens(1, 17)
	fill := func(dir string, key []byte) pstep {
		p := mkLayoutPool(t, 16, LayoutNHD)
		ok(t, p.AddTier(authDiskTier(t, dir, key), TierWriteOnCommit))
		_, want := prefillSeq(t, p, mkSeq(t, p, nil), prompt[:16], 0)
		p.Close()
		return want
	}
	want := fill(keyed, authKeyA)
	fill(keyless, nil)
	n, st, s := authMatch(t, keyed, authKeyA, prompt)
	if n != 16 || st.Hits != 4 || st.Corrupt != 0 {
		t.Fatalf("the same key: matched %d, stats %+v", n, st)
	}
	wantHolds(t, s, want)
	for _, c := range []struct {
		dir string
		key []byte
	}{{keyed, authKeyB}, {keyed, nil}, {keyless, authKeyA}} {
		if n, st, _ := authMatch(t, c.dir, c.key, prompt); n != 0 || st.Hits != 0 || st.Corrupt != 1 {
			t.Fatalf("key %q on %s: matched %d, stats %+v; want a miss counted corrupt", c.key, c.dir, n, st)
		}
	}
	if n, _, _ := authMatch(t, keyless, nil, prompt); n != 16 {
		t.Fatalf("a keyless tier matched %d, want 16", n)
	}
}

func TestAuthenticatedDiskTierRefusesMovedBlocks(t *testing.T) {
	dir := t.TempDir()
	prompt := seqTokens(1, 17)
	p := mkLayoutPool(t, 16, LayoutNHD)
	ok(t, p.AddTier(authDiskTier(t, dir, authKeyA), TierWriteOnCommit))
	prefillSeq(t, p, mkSeq(t, p, nil), prompt[:16], 0)
	p.Close()
	files, err := filepath.Glob(filepath.Join(dir, "*", "*.kvtb"))
	ok(t, err)
	sort.Strings(files)
	if len(files) != 4 {
		t.Fatalf("%d block files, want 4", len(files))
	}
	data := make([][]byte, len(files))
	for i, f := range files {
		data[i] = must[[]byte](t)(os.ReadFile(f))
		if data[i][4] != 2 {
			t.Fatalf("frame version %d, want 2 (authenticated)", data[i][4])
		}
	}
	for i, f := range files { // each file: the next block's K/V and MAC under its own header key
		forged := bytes.Clone(data[(i+1)%len(data)])
		copy(forged[8:80], data[i][8:80])
		ok(t, os.WriteFile(f, forged, 0o644))
	}
	if n, st, _ := authMatch(t, dir, authKeyA, prompt); n != 0 || st.Corrupt != 1 {
		t.Fatalf("moved blocks: matched %d, stats %+v; want a miss counted corrupt", n, st)
	}
}

func TestAuthenticatedDiskTierRefusesBadKeys(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		key  []byte
		want string
	}{
		{make([]byte, 15), "auth_key_len is 15; an authentication key is 16 to 256 bytes"},
		{make([]byte, 257), "auth_key_len is 257"},
		{[]byte{}, "auth_key_len is 0"},
		{nil, "authKey is nil"},
	} {
		_, err := NewAuthenticatedDiskTier(dir, 0, c.key)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("key of %d bytes: %v, want InvalidArgument with %q", len(c.key), err, c.want)
		}
	}
	tier := must[*DiskTier](t)(NewAuthenticatedDiskTier(dir, 0, make([]byte, TierAuthKeyMin)))
	tier.Close()
}

// resp sends one command to a Redis server, as any client could, and returns its reply.
func resp(t *testing.T, addr string, args ...[]byte) any {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	ok(t, err)
	defer c.Close()
	var out bytes.Buffer
	fmt.Fprintf(&out, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&out, "$%d\r\n%s\r\n", len(a), a)
	}
	_, err = c.Write(out.Bytes())
	ok(t, err)
	r := bufio.NewReader(c)
	var read func() any
	read = func() any {
		line, err := r.ReadString('\n')
		ok(t, err)
		line = strings.TrimSuffix(line, "\r\n")
		n, _ := strconv.Atoi(line[1:])
		switch line[0] {
		case '$':
			b := make([]byte, n+2)
			_, err := io.ReadFull(r, b)
			ok(t, err)
			return b[:n]
		case '*':
			items := make([]any, n)
			for i := range items {
				items[i] = read()
			}
			return items
		}
		return line
	}
	return read()
}

func TestAuthenticatedRedisTier(t *testing.T) {
	addr := startRedis(t)
	tokens := seqTokens(700, 13) // three full blocks and one token more
	opts := func(key []byte) RedisTierOptions {
		return RedisTierOptions{Seeds: []string{addr}, KeyPrefix: "go-auth:", Cluster: RedisClusterOff, AuthKey: key}
	}
	writer := mkPool(t, 16, "redis-auth-model")
	must[int](t)(writer.AddRedisTier(opts(authKeyA)))
	prefillSeq(t, writer, mkSeq(t, writer, nil), tokens, 0.5)
	if st := must[TierStats](t)(writer.TierStats(0)); st.Puts != 3 {
		t.Fatalf("stored %d blocks, want 3", st.Puts)
	}
	match := func(key []byte) (int64, TierStats) {
		p := mkPool(t, 16, "redis-auth-model")
		must[int](t)(p.AddRedisTier(opts(key)))
		n := must[int64](t)(mkSeq(t, p, nil).MatchPrefix(tokens))
		return n, must[TierStats](t)(p.TierStats(0))
	}
	if n, st := match(authKeyA); n != 12 || st.Hits != 3 || st.Corrupt != 0 {
		t.Fatalf("the same key: matched %d, stats %+v", n, st)
	}
	for _, key := range [][]byte{authKeyB, nil} {
		if n, st := match(key); n != 0 || st.Corrupt != 1 {
			t.Fatalf("key %q: matched %d, stats %+v; want a miss counted corrupt", key, n, st)
		}
	}
	// A client without the tier's key moves every value under another block's key.
	var names []string
	for _, n := range resp(t, addr, []byte("KEYS"), []byte("go-auth:*")).([]any) {
		names = append(names, string(n.([]byte)))
	}
	sort.Strings(names)
	if len(names) != 3 {
		t.Fatalf("%d keys, want 3", len(names))
	}
	values := make([][]byte, len(names))
	for i, n := range names {
		values[i] = resp(t, addr, []byte("GET"), []byte(n)).([]byte)
	}
	for i, n := range names {
		forged := bytes.Clone(values[(i+1)%len(values)])
		copy(forged[8:80], values[i][8:80])
		if r := resp(t, addr, []byte("SET"), []byte(n), forged); r != "+OK" {
			t.Fatalf("SET: %v", r)
		}
	}
	if n, st := match(authKeyA); n != 0 || st.Corrupt != 1 {
		t.Fatalf("moved values: matched %d, stats %+v; want a miss counted corrupt", n, st)
	}
	p := mkPool(t, 16, "redis-auth-model")
	if _, err := p.AddRedisTier(opts([]byte("12345678"))); err == nil || !strings.Contains(err.Error(),
		"options.auth_key_len is 8") {
		t.Fatalf("an 8-byte key: %v", err)
	}
	if _, err := p.TierStats(0); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("a refused tier was added: TierStats(0) = %v", err)
	}
}

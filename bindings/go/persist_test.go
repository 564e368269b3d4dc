//go:build cgo

package kvcache

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func stepAll(t *testing.T, c *Cache, layers int, start, n int64) {
	t.Helper()
	x := pos(2, 2, start, n, 4)
	for l := 0; l < layers; l++ {
		if _, err := c.Update(l, x, x, nil); err != nil {
			t.Fatalf("Update(%d): %v", l, err)
		}
	}
}

func sameLayers(t *testing.T, what string, a, b *Cache, layers int) {
	t.Helper()
	for l := 0; l < layers; l++ {
		x, err := a.LayerView(l)
		ok(t, err)
		y, err := b.LayerView(l)
		ok(t, err)
		if !eqFloats(flat(t, x.Key), flat(t, y.Key)) || !eqFloats(flat(t, x.Value), flat(t, y.Value)) {
			t.Fatalf("%s: layer %d differs", what, l)
		}
	}
	sa, err := a.SeqLength(0)
	ok(t, err)
	sb, err := b.SeqLength(0)
	ok(t, err)
	if sa != sb {
		t.Fatalf("%s: seq length %d vs %d", what, sa, sb)
	}
}

func TestSaveLoadRestoreThenSameUpdates(t *testing.T) {
	static := &CacheOptions{Preset: PresetStatic, Config: &ModelConfig{NumHiddenLayers: 2}, MaxCacheLen: 16}
	for _, opts := range []*CacheOptions{nil, static} {
		c := mkCache(t, opts)
		stepAll(t, c, 2, 0, 5)
		path := filepath.Join(t.TempDir(), "c.kvc")
		ok(t, c.Save(path))
		loaded, err := Load(path)
		ok(t, err)
		defer loaded.Close()
		restored := mkCache(t, opts)
		ok(t, restored.Restore(path))
		sameLayers(t, "loaded", c, loaded, 2)
		sameLayers(t, "restored", c, restored, 2)
		for s := int64(0); s < 3; s++ {
			for _, x := range []*Cache{c, loaded, restored} {
				stepAll(t, x, 2, 5+s, 1)
			}
			sameLayers(t, "loaded after a step", c, loaded, 2)
			sameLayers(t, "restored after a step", c, restored, 2)
		}
	}
}

func TestPersistErrors(t *testing.T) {
	mk := func(n int64) *Cache {
		return mkCache(t, &CacheOptions{Preset: PresetStatic, Config: &ModelConfig{NumHiddenLayers: 1}, MaxCacheLen: n})
	}
	c := mk(8)
	stepAll(t, c, 1, 0, 3)
	path := filepath.Join(t.TempDir(), "c.kvc")
	ok(t, c.Save(path))
	other := mk(9)
	stepAll(t, other, 1, 7, 2)
	err := other.Restore(path)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "layer 0: max_cache_len 8 (file) vs 9 (cache)") {
		t.Fatalf("restore of another model: %v", err)
	}
	data, _ := os.ReadFile(path)
	data[200] ^= 0xFF
	ok(t, os.WriteFile(path, data, 0o600))
	if err := other.Restore(path); !errors.Is(err, ErrIO) || !strings.Contains(err.Error(), "corrupted") {
		t.Fatalf("restore of a corrupted file: %v", err)
	}
	data[200] ^= 0xFF
	data[8] = 2
	ok(t, os.WriteFile(path, data, 0o600))
	if _, err := Load(path); !errors.Is(err, ErrVersionMismatch) ||
		!strings.Contains(err.Error(), "format version 2 (file) vs 1 (reader)") {
		t.Fatalf("load of a version 2 file: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.kvc")); !errors.Is(err, ErrIO) {
		t.Fatalf("load of a missing file: %v", err)
	}
	v, err := other.LayerView(0)
	ok(t, err)
	if got := seqOf(t, v.Key, 0)[:2]; got[0] != 7 || got[1] != 8 {
		t.Fatalf("the failed restores changed the cache: %v", got)
	}
}

func TestEncoderDecoderSaveLoad(t *testing.T) {
	e, self, _ := newPair(t)
	x := pos(1, 2, 0, 3, 4)
	_, err := self.Update(0, x, x, nil)
	ok(t, err)
	_, err = e.UpdateCross(0, x, x)
	ok(t, err)
	path := filepath.Join(t.TempDir(), "ed.kvc")
	ok(t, e.Save(path))
	back, err := LoadEncoderDecoder(path)
	ok(t, err)
	defer back.Close()
	sameLayers(t, "self-attention", e.SelfAttention(), back.SelfAttention(), 1)
	sameLayers(t, "cross-attention", e.CrossAttention(), back.CrossAttention(), 1)
	fresh, _, _ := newPair(t)
	ok(t, fresh.Restore(path))
	updated, err := fresh.IsUpdated(0)
	ok(t, err)
	if !updated {
		t.Fatalf("restore lost is_updated")
	}
}

// MaxBytes bounds what a file may make a load allocate: a static cache of 16
// slots, 2 layers of 2 x 2 x 16 x (4 + 4) float32, declares 2 KiB per layer.
func TestLoadWithMaxBytes(t *testing.T) {
	opts := &CacheOptions{Preset: PresetStatic, Config: &ModelConfig{NumHiddenLayers: 2}, MaxCacheLen: 16}
	c := mkCache(t, opts)
	stepAll(t, c, 2, 0, 3)
	path := filepath.Join(t.TempDir(), "c.kvc")
	ok(t, c.Save(path))
	const layer = 2 * 2 * 16 * 8 * 4
	exact, err := LoadWithOptions(path, LoadOptions{MaxBytes: 2 * layer})
	ok(t, err)
	defer exact.Close()
	sameLayers(t, "loaded within MaxBytes", c, exact, 2)
	_, err = LoadWithOptions(path, LoadOptions{MaxBytes: 2*layer - 1})
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "layer 1 declares 2048 bytes of key/value stores") ||
		!strings.Contains(err.Error(), "options->max_bytes (4095)") {
		t.Fatalf("a file past MaxBytes: %v", err)
	}

	self, err := LoadWithOptions(path, LoadOptions{})
	ok(t, err)
	cross, err := Load(path)
	ok(t, err)
	e, err := NewEncoderDecoder(self, cross)
	ok(t, err)
	defer e.Close()
	edPath := filepath.Join(t.TempDir(), "ed.kvc")
	ok(t, e.Save(edPath))
	_, err = LoadEncoderDecoderWithOptions(edPath, LoadOptions{MaxBytes: 3 * layer})
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "cross-attention layer 1 declares") {
		t.Fatalf("an encoder-decoder file past MaxBytes: %v", err)
	}
	back, err := LoadEncoderDecoderWithOptions(edPath, LoadOptions{MaxBytes: 4 * layer})
	ok(t, err)
	back.Close()
}

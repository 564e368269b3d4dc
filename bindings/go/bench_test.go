//go:build cgo

package kvcache_test

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kvcache/kvcache/bindings/go/internal/decodebench"
)

// go test -run '^$' -bench DecodeAppend [-kvcache.contexts 1k,8k,32k]
//
// One op is one decode step of bench/bench_decode.c's workload (32 layers,
// 8 KV heads, head_dim 128, bfloat16, batch 1), so ns/op is ns per token;
// every 32 steps the cache is cropped back to its context (not timed). The
// c_* sub-benchmarks run the same steps from C in this process.
// cmd/kvcache-bench measures the same with repetitions and medians, and
// writes results.json.
var benchContexts = flag.String("kvcache.contexts", "1k,8k", "comma-separated context lengths of BenchmarkDecodeAppend (1k = 1024 tokens)")

const benchSteps = 32

var (
	benchOnce sync.Once
	benchData *decodebench.Data
	benchC    *decodebench.CBaseline
)

func parseContexts(b *testing.B) []int64 {
	var out []int64
	for _, f := range strings.Split(*benchContexts, ",") {
		mult := int64(1)
		if strings.HasSuffix(f, "k") {
			f, mult = strings.TrimSuffix(f, "k"), 1024
		}
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || n < 1 {
			b.Fatalf("-kvcache.contexts: bad length %q", f)
		}
		out = append(out, n*mult)
	}
	return out
}

func BenchmarkDecodeAppend(b *testing.B) {
	benchOnce.Do(func() {
		benchData = decodebench.NewData(benchSteps)
		benchC = decodebench.NewCBaseline(benchData)
	})
	for _, n := range parseContexts(b) {
		label := fmt.Sprintf("%dk", n/1024)
		if n%1024 != 0 {
			label = strconv.FormatInt(n, 10)
		}
		g, err := decodebench.NewGoCache(benchData, n)
		if err != nil {
			b.Fatal(err)
		}
		cc, err := benchC.NewCache(benchData, n)
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range []decodebench.Mode{decodebench.ModeStep, decodebench.ModeUpdateAll, decodebench.ModeUpdateLoop} {
			b.Run(fmt.Sprintf("go_%v/context=%s", m, label), func(b *testing.B) {
				run(b, func(s int) error { return g.Step(m, s) }, g.CropBack)
			})
		}
		for _, all := range []bool{true, false} {
			name := map[bool]string{true: "c_update_all", false: "c_update_loop"}[all]
			b.Run(fmt.Sprintf("%s/context=%s", name, label), func(b *testing.B) {
				run(b, func(s int) error { return benchC.Step(cc, s, all) }, cc.CropBack)
			})
		}
		g.Close()
		cc.Close()
	}
}

// run times b.N decode steps, cropping back every benchSteps steps.
func run(b *testing.B, step func(s int) error, cropBack func() error) {
	b.SetBytes(decodebench.StepBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := i % benchSteps
		if err := step(s); err != nil {
			b.Fatal(err)
		}
		if s == benchSteps-1 {
			b.StopTimer()
			if err := cropBack(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	if err := cropBack(); err != nil {
		b.Fatal(err)
	}
}

//go:build cgo

// Command kvcache-bench measures the decode append of the Go binding next
// to the C library, and writes its rows into the benchmarks' results.json.
//
//	kvcache-bench [--json PATH] [--reps N] [--steps N] [--context TOKENS]
//
// It runs bench/bench_decode.c's workload (32 layers, 8 KV heads, head_dim
// 128, bfloat16, batch 1; single-token steps at 1k, 8k and 32k cached
// tokens, cropped back after each repetition) three ways through the
// binding: one prepared Step.Update per step (kvc_cache_update_all), one
// Cache.UpdateAll per step (inputs pinned per call), and 32 Cache.Update
// per step. Each repetition is interleaved with the same loop called from C
// in this process (the C baseline), so that the overhead ratios hold under
// the load of a shared machine. Caches are reserved to their final length,
// the C baseline's and the binding's alike, and the lengths are measured one
// after the other, to bound memory (two 4 GiB caches at 32k).
//
// Rows (bench "decode_append", impl "kvcache-go", the schema of
// bench/bench_common.h): append_ns_per_token_<len> (Step.Update),
// append_loop_ns_per_token_<len> (32 x Update), append_unprepared_ns_per_token_<len>
// (UpdateAll), each with _min_ and _max_ variants; c_append_ns_per_token_<len>
// and c_append_loop_ns_per_token_<len> (the C baseline); the overheads
// append_overhead_vs_c_<len> and append_loop_overhead_vs_c_<len> (binding
// median / C baseline median); and, when results.json already holds
// bench_decode's rows, append_ratio_to_kvcache_c_<len> against them.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	kvcache "github.com/kvcache/kvcache/bindings/go"
	"github.com/kvcache/kvcache/bindings/go/internal/decodebench"
)

type row struct {
	metric, unit string
	value        float64
}

type stats struct{ median, min, max float64 }

func summarize(v []float64) stats {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	m := s[n/2]
	if n%2 == 0 {
		m = (s[n/2-1] + s[n/2]) / 2
	}
	return stats{m, s[0], s[n-1]}
}

func label(n int64) string {
	if n%1024 == 0 {
		return strconv.FormatInt(n/1024, 10) + "k"
	}
	return strconv.FormatInt(n, 10)
}

func main() {
	jsonPath := flag.String("json", "build/bench/results.json", "results file")
	reps := flag.Int("reps", 101, "repetitions per measurement, median reported")
	steps := flag.Int("steps", 32, "decode steps per repetition")
	context := flag.Int64("context", 0, "only this context length (default 1k, 8k and 32k)")
	flag.Parse()
	if *reps < 1 || *steps < 1 || *context < 0 || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*jsonPath, *reps, *steps, *context); err != nil {
		fmt.Fprintln(os.Stderr, "kvcache-bench:", err)
		os.Exit(1)
	}
}

func run(jsonPath string, reps, steps int, context int64) error {
	lengths := []int64{1024, 8192, 32768}
	if context > 0 {
		lengths = []int64{context}
	}
	d := decodebench.NewData(steps)
	cb := decodebench.NewCBaseline(d)
	defer cb.Close()
	fmt.Printf("decode append through the Go binding: %d layers x %d KV heads x head_dim %d, bfloat16, batch 1\n",
		decodebench.Layers, decodebench.KVHeads, decodebench.HeadDim)
	fmt.Printf("%d repetitions of %d steps; kvcache %s\n\n", reps, steps, kvcache.VersionString())

	var rows []row
	add := func(metric string, v float64, unit string) { rows = append(rows, row{metric, unit, v}) }
	addStats := func(prefix, l string, s stats) {
		add(prefix+"_ns_per_token_"+l, s.median, "ns")
		add(prefix+"_min_ns_per_token_"+l, s.min, "ns")
		add(prefix+"_max_ns_per_token_"+l, s.max, "ns")
	}
	cRows := readRows(jsonPath, "kvcache-c")
	fmt.Printf("%-8s %-34s %14s %12s %12s %10s\n", "context", "impl", "median ns/tok", "min", "max", "x C")
	for _, n := range lengths {
		l := label(n)
		g, err := decodebench.NewGoCache(d, n)
		if err != nil {
			return err
		}
		cc, err := cb.NewCache(d, n)
		if err != nil {
			g.Close()
			return err
		}
		samples, err := measure(g, cb, cc, reps)
		g.Close()
		cc.Close()
		if err != nil {
			return err
		}
		cAll, cLoop := summarize(samples["c_all"]), summarize(samples["c_loop"])
		step, all, loop := summarize(samples["step"]), summarize(samples["update_all"]), summarize(samples["update_loop"])
		print := func(name string, s stats, base float64) {
			fmt.Printf("%-8s %-34s %14.0f %12.0f %12.0f %10.3f\n", l, name, s.median, s.min, s.max, s.median/base)
		}
		print("C: kvc_cache_update_all", cAll, cAll.median)
		print("Go: Step.Update", step, cAll.median)
		print("Go: Cache.UpdateAll (pins per call)", all, cAll.median)
		print("C: 32 x kvc_cache_update", cLoop, cLoop.median)
		print("Go: 32 x Cache.Update", loop, cLoop.median)
		addStats("append", l, step)
		addStats("append_loop", l, loop)
		addStats("append_unprepared", l, all)
		addStats("c_append", l, cAll)
		addStats("c_append_loop", l, cLoop)
		add("append_overhead_vs_c_"+l, step.median/cAll.median, "x")
		add("append_loop_overhead_vs_c_"+l, loop.median/cLoop.median, "x")
		add("append_unprepared_overhead_vs_c_"+l, all.median/cAll.median, "x")
		if c, ok := cRows["append_ns_per_token_"+l]; ok && c > 0 {
			add("append_ratio_to_kvcache_c_"+l, step.median/c, "x")
		}
		if c, ok := cRows["append_loop_ns_per_token_"+l]; ok && c > 0 {
			add("append_loop_ratio_to_kvcache_c_"+l, loop.median/c, "x")
		}
	}
	add("append_bytes_per_token", decodebench.StepBytes, "bytes")
	return writeRows(jsonPath, rows)
}

// measure interleaves the five loops repetition by repetition.
func measure(g *decodebench.GoCache, cb *decodebench.CBaseline, cc *decodebench.CCache, reps int) (map[string][]float64, error) {
	// Warm-up: first touch of every page, one verified repetition per mode.
	for _, m := range []decodebench.Mode{decodebench.ModeStep, decodebench.ModeUpdateAll, decodebench.ModeUpdateLoop} {
		if err := g.RunSteps(m); err != nil {
			return nil, err
		}
		if err := g.Verify(); err != nil {
			return nil, fmt.Errorf("%v: %w", m, err)
		}
		if err := g.CropBack(); err != nil {
			return nil, err
		}
	}
	for _, all := range []bool{true, false} {
		if _, err := cb.TimeSteps(cc, all); err != nil {
			return nil, err
		}
	}
	s := map[string][]float64{}
	type job struct {
		name string
		f    func() (float64, error)
	}
	jobs := []job{
		{"c_all", func() (float64, error) { return cb.TimeSteps(cc, true) }},
		{"step", func() (float64, error) { return g.TimeSteps(decodebench.ModeStep) }},
		{"update_all", func() (float64, error) { return g.TimeSteps(decodebench.ModeUpdateAll) }},
		{"c_loop", func() (float64, error) { return cb.TimeSteps(cc, false) }},
		{"update_loop", func() (float64, error) { return g.TimeSteps(decodebench.ModeUpdateLoop) }},
	}
	for r := 0; r < reps; r++ {
		// Every other repetition runs the loops in the reverse order, so that
		// running first or after another loop favours none of them.
		order := jobs
		if r%2 == 1 {
			order = []job{jobs[4], jobs[3], jobs[2], jobs[1], jobs[0]}
		}
		for _, job := range order {
			ns, err := job.f()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", job.name, err)
			}
			s[job.name] = append(s[job.name], ns)
		}
	}
	return s, nil
}

const bench = "decode_append"

func rowKey(impl string) string {
	return fmt.Sprintf("{\"bench\": \"%s\", \"impl\": \"%s\",", bench, impl)
}

// readRows returns the metrics of impl's decode_append rows in path.
func readRows(path, impl string) map[string]float64 {
	out := map[string]float64{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	key := rowKey(impl)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), ", ")
		if !strings.HasPrefix(line, key) {
			continue
		}
		metric := field(line, "\"metric\": \"", "\"")
		value, err := strconv.ParseFloat(field(line, "\"value\": ", ","), 64)
		if metric != "" && err == nil {
			out[metric] = value
		}
	}
	return out
}

func field(line, start, end string) string {
	i := strings.Index(line, start)
	if i < 0 {
		return ""
	}
	rest := line[i+len(start):]
	j := strings.Index(rest, end)
	if j < 0 {
		return ""
	}
	return rest[:j]
}

// writeRows follows bench_common.h's bench_write_json: rows of other
// (bench, impl) pairs are kept, ours replaced; one object per line.
func writeRows(path string, rows []row) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return err
	}
	var kept []string
	key := rowKey("kvcache-go")
	if f, err := os.Open(path); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), ", \r")
			if strings.HasPrefix(line, "{") && !strings.HasPrefix(line, key) {
				kept = append(kept, line)
			}
		}
		f.Close()
	}
	for _, r := range rows {
		kept = append(kept, fmt.Sprintf("%s \"metric\": \"%s\", \"value\": %s, \"unit\": \"%s\"}", key, r.metric,
			strconv.FormatFloat(r.value, 'g', 10, 64), r.unit))
	}
	var b strings.Builder
	b.WriteString("[\n")
	for i, line := range kept {
		b.WriteString(line)
		if i+1 < len(kept) {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("]\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o666); err != nil {
		return err
	}
	fmt.Printf("results: %d rows written to %s\n", len(rows), path)
	return nil
}

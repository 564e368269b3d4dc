module github.com/kvcache/kvcache/bindings/go

// 1.24: the cgo noescape/nocallback annotations that keep the per-call cost
// of the hot path (Cache.Update) free of heap allocations.
go 1.24

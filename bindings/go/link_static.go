//go:build cgo && kvcache_static

package kvcache

// With the kvcache_static build tag the program carries the library (libkvcache.a, named by path in
// kvcache-static.pc): it needs only libc and libm at run time and runs wherever it is copied, the installed
// prefix included, moved or gone.

/*
#cgo pkg-config: kvcache-static
*/
import "C"

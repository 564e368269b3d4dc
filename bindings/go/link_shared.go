//go:build cgo && !kvcache_static

package kvcache

// How the package links the C library (cgo's flags are the package's, whichever file states them): by
// default the shared libkvcache.so that pkg-config finds; with the kvcache_static build tag the static
// archive instead (link_static.go).

/*
#cgo pkg-config: kvcache
*/
import "C"

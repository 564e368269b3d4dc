//go:build cgo && !linux

package kvcache

import "os/exec"

// dieWithParent: only Linux kills a child with its parent; elsewhere the test's cleanup does.
func dieWithParent(*exec.Cmd) {}

//go:build cgo && linux

package kvcache

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the server killed when the test process dies, even by a crash.
func dieWithParent(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }

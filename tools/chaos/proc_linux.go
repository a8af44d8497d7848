//go:build linux

package main

import "syscall"

// sysProcAttr puts pubsink in its own process group, so that a signal
// reaches only it, and has the kernel kill it if the campaign dies first.
// Pdeathsig fires when the OS thread that started the child exits; the Go
// runtime keeps its threads while the program runs, and nothing here locks
// one.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

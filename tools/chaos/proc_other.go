//go:build unix && !linux

package main

import "syscall"

// sysProcAttr puts pubsink in its own process group, so that a signal
// reaches only it. Without Pdeathsig, a campaign killed hard leaves the
// child running; stop it by its process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

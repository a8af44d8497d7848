//go:build linux

package emulator

import "syscall"

// sysProcAttr puts the emulator in its own process group, so Stop can end
// everything it started without touching anyone else's emulators, and asks
// the kernel to kill it if this process dies first (a test binary killed by
// its -timeout would otherwise leave JVMs behind on a shared machine).
// Pdeathsig fires when the OS thread that started the child exits; the Go
// runtime does not end threads while the program runs, except a thread
// locked with runtime.LockOSThread whose goroutine exits, which this package
// never does around Start.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

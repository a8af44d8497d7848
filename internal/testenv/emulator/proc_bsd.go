//go:build unix && !linux

package emulator

import "syscall"

// sysProcAttr puts the emulator in its own process group, so Stop can end
// everything it started without touching anyone else's emulators.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

//go:build !unix

package emulator

import (
	"errors"
	"syscall"
)

// The emulators are only driven on Unix: Stop needs process groups, so
// sysProcAttr returns nil and startProcess refuses to start anything.

type sigNum int

const (
	sigTerm sigNum = 15
	sigKill sigNum = 9
)

func signalGroup(pgid int, sig sigNum) error {
	return errors.New("emulator: process groups are not supported on this OS")
}

func sysProcAttr() *syscall.SysProcAttr { return nil }

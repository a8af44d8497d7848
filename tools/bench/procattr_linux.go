package main

import "syscall"

// procAttr makes a child the leader of its own process group, killed if
// the bench dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

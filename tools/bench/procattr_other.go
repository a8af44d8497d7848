//go:build !linux

package main

import "syscall"

// procAttr makes a child the leader of its own process group.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

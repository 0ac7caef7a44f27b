//go:build !linux

package chaos

import "syscall"

// ProcAttr returns the attributes of the run's child processes. Outside
// Linux there is no death signal: a killed run may leave its children.
func ProcAttr(sig syscall.Signal) *syscall.SysProcAttr { return nil }

//go:build !linux

package rediscluster

import "syscall"

// procAttr returns the nodes' process attributes. Outside Linux there is no
// death signal: a test binary killed mid-run may leave its nodes running.
func procAttr() *syscall.SysProcAttr { return nil }

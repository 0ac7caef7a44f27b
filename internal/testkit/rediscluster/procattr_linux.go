package rediscluster

import "syscall"

// procAttr puts a node in a process group of its own, so a terminal's
// signals reach only the test, and kills it when the test binary dies, so
// that a test killed mid-run leaves no redis-server behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

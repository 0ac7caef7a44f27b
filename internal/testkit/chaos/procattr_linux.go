package chaos

import "syscall"

// ProcAttr returns the attributes of the run's child processes: a process
// group of their own, so a terminal's signals reach only the run, and
// death, with sig, when the process that started them dies, so a killed
// run leaves no orphans.
func ProcAttr(sig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: sig}
}

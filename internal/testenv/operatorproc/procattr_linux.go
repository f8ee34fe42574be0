package operatorproc

import "syscall"

// procAttr makes the kernel SIGKILL the operator if the test process dies
// first (a test binary killed at its timeout), so that no operator outlives
// its test on a CI machine.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

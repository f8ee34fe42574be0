package node

import (
	"os"
	"os/exec"
	"syscall"
)

// Command returns the command that runs kobe-node (agent) for the Config
// at configPath in a new network and mount namespace and a process group
// of its own, output to logf. Go makes / MS_REC|MS_PRIVATE in the child
// after unsharing, so nothing kobe-node mounts reaches the host. The
// environment is empty but for PATH and GOGC (as its daemons'): the
// caller's may hold credentials.
func Command(agent, configPath string, logf *os.File) *exec.Cmd {
	cmd := exec.Command(agent, "--config", configPath)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "GOGC=50"}
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:      true,
		Unshareflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET,
	}
	return cmd
}

//go:build !unix

package controller

import (
	"os"
	"os/exec"
	"syscall"
)

// setGroup is a no-op where process groups are not available.
func setGroup(cmd *exec.Cmd) {}

// signalGroup kills only the process itself where process groups are not
// available.
func signalGroup(pid int, sig syscall.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	p.Kill()
	return nil
}

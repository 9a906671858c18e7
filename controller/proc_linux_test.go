//go:build linux

package controller

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestSweepSparesReusedPid: a victim the sweep read from /proc exits and
// its pid goes to an unrelated process (started by the test, forced onto
// that pid with ns_last_pid) before the sweep signals it: the unrelated
// process lives (a plain kill(2) of the pid read would have killed it).
func TestSweepSparesReusedPid(t *testing.T) {
	if err := becomeSubreaper(); err != nil {
		t.Skipf("not a subreaper: %v", err)
	}
	const aid = "at-reused"
	victim := exec.Command("sleep", "60")
	victim.Env = []string{"AGL_ATTEMPT_ID=" + aid}
	victim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	pid := victim.Process.Pid
	var unrelated *exec.Cmd
	stale := 0
	afterRead := func(victims []proc) {
		if unrelated != nil {
			return
		}
		for _, p := range victims {
			if p.pid == pid {
				stale++
			}
		}
		if stale == 0 {
			return
		}
		// The victim exits and is reaped; its pid goes to a process of
		// the test's own (its group, no attempt in its environment).
		victim.Process.Kill()
		victim.Wait()
		time.Sleep(30 * time.Millisecond) // past the victim's start tick
		for range 50 {
			if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
				t.Skipf("cannot choose the next pid (ns_last_pid): %v", err)
			}
			c := exec.Command("sleep", "60")
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			if c.Process.Pid == pid {
				unrelated = c
				return
			}
			c.Process.Kill()
			c.Wait()
		}
		t.Skip("another process kept taking the pid")
	}
	sweepWith(aid, func(string) bool { return false }, func(int) bool { return false }, afterRead)
	if stale == 0 || unrelated == nil {
		t.Fatalf("the sweep did not list the victim (%d)", stale)
	}
	defer func() { unrelated.Process.Kill(); unrelated.Wait() }()
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the unrelated process that took pid %d was killed: %v", pid, err)
	}
}

//go:build linux

package pidfd

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func startSleep(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// reusePid starts `sleep 60` with the pid old had (old must have been
// reaped), by setting the kernel's last allocated pid just below it; it
// skips where that is not allowed (not root) or other forks keep taking
// the pid first.
func reusePid(t *testing.T, pid int) *exec.Cmd {
	t.Helper()
	for range 50 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Skipf("cannot choose the next pid (ns_last_pid): %v", err)
		}
		cmd := startSleep(t)
		if cmd.Process.Pid == pid {
			return cmd
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	t.Skip("another process kept taking the pid")
	return nil
}

// TestSignal: Signal reaches the process it is meant for, and refuses a
// newcomer that took its pid after it was reaped (a real pid reuse,
// forced with ns_last_pid), on the pidfd path and the kill(2) fallback
// alike.
func TestSignal(t *testing.T) {
	if !Supported() {
		t.Log("no pidfds on this kernel: the pidfd rows run the fallback")
	}
	cases := []struct {
		name   string
		reaped bool // the meant process is killed and reaped first
		reuse  bool // then an unrelated process takes its pid
		no     bool // the check says no
		want   []error
	}{
		{name: "same process", want: []error{nil}},
		{name: "pid reused", reaped: true, reuse: true, want: []error{ErrNotSame}},
		{name: "check says no", no: true, want: []error{ErrNotSame}},
		// pidfd_open fails (ESRCH); the fallback's check finds no stat.
		{name: "exited, pid free", reaped: true, want: []error{ErrGone, ErrNotSame}},
	}
	for _, fallback := range []bool{false, true} {
		for _, c := range cases {
			name := c.name
			if fallback {
				name += " (kill fallback)"
			}
			t.Run(name, func(t *testing.T) {
				meant := startSleep(t)
				pid := meant.Process.Pid
				start, err := StartTime(pid)
				if err != nil {
					t.Fatal(err)
				}
				same := Started(start)
				if c.no {
					same = func(int) bool { return false }
				}
				if c.reaped {
					meant.Process.Kill()
					meant.Wait()
				}
				var other *exec.Cmd
				if c.reuse {
					// A start time is in clock ticks (10 ms): a real reuse
					// comes after the pid space wrapped, far later.
					time.Sleep(30 * time.Millisecond)
					other = reusePid(t, pid)
				}
				sig := Signal
				if fallback {
					sig = killChecked
				}
				err = sig(pid, syscall.SIGKILL, same)
				ok := false
				for _, w := range c.want {
					ok = ok || errors.Is(err, w) || (w == nil && err == nil)
				}
				if !ok {
					t.Fatalf("Signal: %v, want one of %v", err, c.want)
				}
				if other != nil {
					time.Sleep(20 * time.Millisecond)
					if !alive(other.Process.Pid) {
						t.Error("the unrelated process that took the pid was killed")
					}
				}
				if !c.reaped {
					if c.want[0] == nil {
						meant.Wait() // reaps the killed process
						if alive(pid) {
							t.Error("the meant process is still alive")
						}
					} else if !alive(pid) {
						t.Error("signalled although the check said no")
					}
				}
			})
		}
	}
}

func TestParseStartTime(t *testing.T) {
	cases := []struct {
		stat string
		want uint64
		ok   bool
	}{
		{"42 (sleep) S 1 42 42 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 123456 8192 100", 123456, true},
		{"42 (a b) c) (d) S 1 42 42 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 77 8192 100", 77, true},
		{"42 (sleep) S 1 42", 0, false},
		{"garbage", 0, false},
	}
	for _, c := range cases {
		got, err := ParseStartTime([]byte(c.stat))
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseStartTime(%q) = %d, %v; want %d ok=%v", c.stat, got, err, c.want, c.ok)
		}
	}
	if st, err := StartTime(os.Getpid()); err != nil || st == 0 {
		t.Errorf("StartTime(self) = %d, %v", st, err)
	}
}

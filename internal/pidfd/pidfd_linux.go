//go:build linux

// Package pidfd signals a process only if it is still the process the
// caller means: a pid read from /proc (or a cgroup's cgroup.procs) may
// have been reused by an unrelated process by the time it is signalled —
// likely after a fork bomb has cycled through the pid space. Signal pins
// the process with a pidfd (pidfd_open, Linux 5.3+) before checking its
// identity, then signals through the pidfd, so that the check and the
// signal are about the same process; where pidfds are not available it
// checks just before kill(2), which narrows the window without closing it.
package pidfd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrGone: the process has exited (or was never there).
var ErrGone = errors.New("process gone")

// ErrNotSame: the pid now names another process than the one meant (the
// check said no); nothing was signalled.
var ErrNotSame = errors.New("pid names another process now")

var support struct {
	once sync.Once
	ok   bool
}

// Supported reports whether this kernel gives pidfds (pidfd_open and
// pidfd_send_signal); when not, Signal falls back to kill(2).
func Supported() bool {
	support.once.Do(func() {
		fd, err := unix.PidfdOpen(os.Getpid(), 0)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		// Signal 0 checks that the call exists and is allowed.
		support.ok = unix.PidfdSendSignal(fd, 0, nil, 0) == nil
	})
	return support.ok
}

// Signal sends sig to pid if same(pid) — run while the process is pinned —
// reports that pid still names the process the caller means.
func Signal(pid int, sig syscall.Signal, same func(pid int) bool) error {
	if pid <= 0 {
		return fmt.Errorf("pidfd: pid %d", pid)
	}
	if !Supported() {
		return killChecked(pid, sig, same)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return ErrGone
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
		return killChecked(pid, sig, same)
	case err != nil:
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	// The pidfd names the process that held pid when it was opened: if
	// that was a newcomer, same sees the newcomer and says no; if it was
	// the process meant and it has exited since, the signal below fails
	// with ESRCH rather than reaching whoever holds pid now.
	if !same(pid) {
		return ErrNotSame
	}
	if err := unix.PidfdSendSignal(fd, unix.Signal(sig), nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return ErrGone
		}
		return fmt.Errorf("pidfd_send_signal %d: %w", pid, err)
	}
	return nil
}

// killChecked is Signal without pidfds.
func killChecked(pid int, sig syscall.Signal, same func(pid int) bool) error {
	if !same(pid) {
		return ErrNotSame
	}
	if err := syscall.Kill(pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return ErrGone
		}
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	return nil
}

// StartTime is when pid started, in clock ticks since boot
// (/proc/PID/stat field 22): with the pid, it names one process for the
// whole uptime (a pid comes back only after the pid space wrapped, which
// takes far longer than a tick).
func StartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, ErrGone
		}
		return 0, err
	}
	return ParseStartTime(b)
}

// ParseStartTime reads the start time from the text of /proc/PID/stat.
func ParseStartTime(stat []byte) (uint64, error) {
	// pid (comm) state ppid … : comm may hold spaces and parens; the
	// start time is the 20th field after it.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("pidfd: malformed /proc stat")
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return 0, errors.New("pidfd: short /proc stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// Started returns a check for Signal: pid still names the process that
// started at start.
func Started(start uint64) func(pid int) bool {
	return func(pid int) bool {
		st, err := StartTime(pid)
		return err == nil && st == start
	}
}

//go:build linux

package controller

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aglrl/agl/internal/pidfd"
)

var subreaper struct {
	once sync.Once
	err  error
}

// becomeSubreaper makes this process the child subreaper of everything it
// starts (PR_SET_CHILD_SUBREAPER): a process a harness left behind — even
// one that called setsid() or double-forked — is re-parented to the
// controller instead of init, where sweep finds it.
func becomeSubreaper() error {
	subreaper.once.Do(func() {
		subreaper.err = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	})
	return subreaper.err
}

// proc is one process as /proc/PID/stat describes it.
type proc struct {
	pid, ppid, pgid int
	zombie          bool
	// start is its start time: with pid, what tells it from a later
	// process that took the same pid.
	start uint64
}

// readProcs lists every process of the system.
func readProcs() map[int]proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make(map[int]proc, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgid, _ := strconv.Atoi(f[2])
		start, err := pidfd.ParseStartTime(b)
		if err != nil {
			continue
		}
		out[pid] = proc{pid: pid, ppid: ppid, pgid: pgid, zombie: f[0] == "Z", start: start}
	}
	return out
}

// attemptOf returns the AGL_ATTEMPT_ID in a process's initial environment
// ("" when it has none or it cannot be read).
func attemptOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("AGL_ATTEMPT_ID=")); ok {
			return string(v)
		}
	}
	return ""
}

// sweep kills every process attempt aid left behind once its harness (or
// evaluator) has exited, and reaps those re-parented to this process. With
// the controller a subreaper, they are all descendants of this process;
// it spares the subtrees of the live processes of other attempts (live)
// and processes that are not the controller's own doing: those in this
// process's own group naming no attempt (what a test binary or agl itself
// starts). A left-behind process is recognised by the attempt its
// environment names, or by having left this process's group (every
// harness starts in a group of its own) without naming a running attempt.
// A victim is signalled through a pidfd, and only if its pid still names
// the process read from /proc (same start time): a fork bomb cycles
// through the pid space, and a pid it freed meanwhile may be an unrelated
// process's by the time the sweep gets to it. It returns how many
// processes it killed.
func sweep(aid string, running func(aid string) bool, live func(pid int) bool) int {
	return sweepWith(aid, running, live, nil)
}

// sweepWith is sweep; afterRead, if set, runs after each read of /proc,
// before the victims are signalled (a test makes a pid stale there).
func sweepWith(aid string, running func(aid string) bool, live func(pid int) bool, afterRead func(victims []proc)) int {
	self, ownGroup := os.Getpid(), syscall.Getpgrp()
	killed := 0
	// Bounded: a process stuck in the kernel (D state) is left to a later
	// sweep rather than holding up the controller.
	deadline := time.Now().Add(5 * time.Second)
	for round := 0; round < 50 && time.Now().Before(deadline); round++ {
		procs := readProcs()
		children := map[int][]int{}
		for _, p := range procs {
			children[p.ppid] = append(children[p.ppid], p.pid)
		}
		var victims []proc
		// walk visits the children of pid; below a victim, everything is
		// the attempt's, whatever its environment or group says.
		var walk func(pid int, ours bool)
		walk = func(pid int, ours bool) {
			for _, c := range children[pid] {
				if live(c) {
					continue // another attempt's harness or evaluator, and its tree
				}
				p := procs[c]
				if !ours {
					owner := attemptOf(c)
					switch {
					case owner == aid:
					case p.pgid == ownGroup && owner == "":
						continue // not started by a harness
					case owner != "" && running(owner):
						continue // left behind by another attempt still running
					}
				}
				victims = append(victims, p)
				walk(c, true)
			}
		}
		walk(self, false)
		if len(victims) == 0 {
			return killed
		}
		if afterRead != nil {
			afterRead(victims)
		}
		dead := make([]bool, len(victims))
		for i, p := range victims {
			dead[i] = p.zombie
			if !p.zombie && pidfd.Signal(p.pid, syscall.SIGKILL, pidfd.Started(p.start)) == nil {
				killed++
				dead[i] = true
			}
		}
		// Reap those re-parented to us (their own children come to us in
		// turn, found by the next round).
		for i, p := range victims {
			if p.ppid != self || !dead[i] {
				continue
			}
			for {
				var ws syscall.WaitStatus
				n, err := syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil)
				if n == p.pid || errors.Is(err, syscall.ECHILD) || (err != nil && !errors.Is(err, syscall.EINTR)) || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	return killed
}

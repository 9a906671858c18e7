//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Run runs argv in the sandbox s describes, with stdin, and passes its
// stdout and stderr on (each cut at the output limit, with a marker). It
// returns how the command ended; the error is for a sandbox that could not
// start (no bwrap, bad spec), never for the command's own failure.
func Run(ctx context.Context, s Spec, argv []string, stdin io.Reader, stdout, stderr io.Writer) (Result, error) {
	res := Result{Argv: argv}
	if len(argv) == 0 {
		return res, errors.New("sandbox: no command")
	}
	if err := s.check(); err != nil {
		return res, err
	}
	lim := s.Limits.WithDefaults()
	bw := s.Bwrap
	if bw == "" {
		p, err := exec.LookPath("bwrap")
		if err != nil {
			return res, errors.New("sandbox: bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
		}
		bw = p
	}
	cg := newCgroup(detectCgroups(cgroupRoot), s.Cgroups, lim)
	defer cg.remove()
	res.Cgroups = cg.ok()

	// A shell sets the rlimits, joins the cgroups, then becomes bwrap:
	// everything bwrap starts is inside the limits from its first fork.
	script := "ulimit -t " + strconv.Itoa(lim.CPUSeconds) + " || exit 125\n"
	if !cg.ok() {
		script += "ulimit -v " + strconv.FormatInt(lim.MemoryBytes/1024, 10) + " 2>/dev/null\nulimit -p " + strconv.Itoa(lim.Processes) + " 2>/dev/null || ulimit -u " + strconv.Itoa(lim.Processes) + " 2>/dev/null\n"
	}
	script += `while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"`
	args := []string{"-c", script, "sh"}
	args = append(args, cg.procs()...)
	args = append(append(args, "--", bw), Args(s, argv)...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Stdin = stdin
	cmd.Env = append([]string{"PATH=" + DefaultPath}, s.HostEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	errR, err := cmd.StderrPipe()
	if err != nil {
		return res, err
	}
	start := time.Now()
	startCmd := s.Start
	if startCmd == nil {
		startCmd = (*exec.Cmd).Start
	}
	if err := startCmd(cmd); err != nil {
		return res, fmt.Errorf("sandbox: start bwrap: %w", err)
	}
	var wg sync.WaitGroup
	var outTrunc, errTrunc bool
	var seen signs
	wg.Add(2)
	go func() {
		defer wg.Done()
		res.StdoutBytes, outTrunc = copyLimited(stdout, outR, lim.OutputBytes, "stdout", &seen)
	}()
	go func() {
		defer wg.Done()
		res.StderrBytes, errTrunc = copyLimited(stderr, errR, lim.OutputBytes, "stderr", &seen)
	}()

	timer := time.NewTimer(lim.Timeout)
	defer timer.Stop()
	done := make(chan struct{})
	timedOut := make(chan bool, 1)
	go func() {
		select {
		case <-timer.C:
			timedOut <- true
		case <-ctx.Done():
			timedOut <- false
		case <-done:
			timedOut <- false
			return
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cg.kill()
	}()
	wg.Wait() // the pipes close when every process holding them is gone
	werr := cmd.Wait()
	if s.Waited != nil {
		s.Waited(cmd.Process.Pid)
	}
	close(done)
	res.TimedOut = <-timedOut
	res.Duration = time.Since(start).Seconds()
	cg.kill()
	res.Truncated = outTrunc || errTrunc
	res.CutBytes = max(res.StdoutBytes-lim.OutputBytes, 0) + max(res.StderrBytes-lim.OutputBytes, 0)
	res.Blocked = seen.list()
	res.MemoryLimit, res.ProcessLimit = cg.hit()
	res.ProcessLimit = res.ProcessLimit || seen.has(forkRefused)
	var ee *exec.ExitError
	switch {
	case res.TimedOut:
		res.Exit = ExitTimeout
		fmt.Fprintf(stderr, "\n[agl sandbox: timed out after %s; the command and everything it started were killed]\n", lim.Timeout)
	case werr == nil:
	case errors.As(werr, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Exit = 128 + int(ws.Signal())
		} else {
			res.Exit = ee.ExitCode()
		}
	default:
		return res, fmt.Errorf("sandbox: %w", werr)
	}
	if res.MemoryLimit {
		fmt.Fprintf(stderr, "\n[agl sandbox: memory limit of %d bytes reached]\n", lim.MemoryBytes)
	}
	if res.ProcessLimit {
		fmt.Fprintf(stderr, "\n[agl sandbox: process limit of %d reached]\n", lim.Processes)
	}
	var st syscall.Statfs_t
	if syscall.Statfs(s.Workspace, &st) == nil && st.Bavail == 0 {
		res.DiskFull = true
		fmt.Fprintf(stderr, "\n[agl sandbox: the workspace is full]\n")
	}
	if s.Journal != "" {
		if err := appendJournal(s.Journal, res); err != nil {
			return res, err
		}
	}
	return res, ctx.Err()
}

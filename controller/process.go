package controller

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aglrl/agl/store"
)

// procs tracks, for the whole process (the subreaper is process-wide and
// several controllers may run in one process), the attempts running and
// the harness and evaluator processes alive, so that one attempt's sweep
// spares the others.
var procs = &registry{pids: map[int]bool{}, attempts: map[string]int{}}

type registry struct {
	// starting is held (shared) while a process is started and
	// registered, and exclusively by a sweep.
	starting sync.RWMutex
	mu       sync.Mutex
	pids     map[int]bool
	attempts map[string]int
}

// start starts cmd and registers its process as live, with no sweep
// running in between.
func (r *registry) start(cmd *exec.Cmd) error {
	r.starting.RLock()
	defer r.starting.RUnlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	r.add(cmd.Process.Pid)
	return nil
}

func (r *registry) begin(aid string) { r.mu.Lock(); r.attempts[aid]++; r.mu.Unlock() }

func (r *registry) end(aid string) {
	r.mu.Lock()
	if r.attempts[aid]--; r.attempts[aid] <= 0 {
		delete(r.attempts, aid)
	}
	r.mu.Unlock()
}

func (r *registry) add(pid int)    { r.mu.Lock(); r.pids[pid] = true; r.mu.Unlock() }
func (r *registry) remove(pid int) { r.mu.Lock(); delete(r.pids, pid); r.mu.Unlock() }

func (r *registry) live(pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pids[pid]
}

func (r *registry) running(aid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts[aid] > 0
}

// reap waits up to KillGrace for the harness to exit after SIGTERM, then
// kills its whole group.
func (c *runner) reap(pid int, exited <-chan error) {
	t := time.NewTimer(c.cfg.KillGrace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		signalGroup(pid, syscall.SIGKILL)
		<-exited
	}
	signalGroup(pid, syscall.SIGKILL)
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// inheritedSecret names variables of the controller's own environment that
// the harness never inherits: the admin key, the store's URL (it may hold a
// database password) and provider credentials that would travel next to the
// scoped key (an SDK sending ANTHROPIC_AUTH_TOKEN as a bearer beside the
// scoped x-api-key is refused by the gateway as two different keys; the
// Gemini SDKs prefer GOOGLE_API_KEY to GEMINI_API_KEY). The scoped keys
// themselves are set below.
func inheritedSecret(name string) bool {
	switch name {
	case "AGL_ADMIN_KEY", "AGL_STORE_URL", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY":
		return true
	}
	return false
}

// env builds the harness environment.
func (c *runner) env(claim store.Claim, rewardPath string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); inheritedSecret(k) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, c.contractEnv(c.cfg.GatewayURL, claim, rewardPath)...)
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// exitMessage says how the process ended: "exit status N" or "signal: …".
func exitMessage(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ProcessState.String()
	}
	return err.Error()
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// errLost is the cancel cause of an attempt that ended elsewhere.
var errLost = errors.New("attempt ended elsewhere")

// attempt is one running attempt.
type attempt struct {
	claim   store.Claim
	rid     string
	aid     string
	dir     string
	outPath string
	errPath string
	env     []string
	// argv is the harness command (controller.command, or an AL agent
	// class's worker).
	argv []string
	log  *slog.Logger
	// secrets are redacted from everything stored from the attempt's
	// output: its scoped key and the admin key.
	secrets []string
	// repo is set for a repository task.
	repo *repoAttempt
}

func (c *runner) runAttempt(parent context.Context, claim store.Claim) {
	a := &attempt{claim: claim, rid: claim.Rollout.ID, aid: claim.Attempt.ID}
	a.log = c.log.With("rollout", a.rid, "attempt", a.aid)
	a.secrets = []string{claim.Key, c.cfg.AdminKey}
	procs.begin(a.aid)
	defer procs.end(a.aid)
	a.log.Debug("controller: attempt claimed")
	// ctx ends when the controller stops or the attempt is lost.
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		c.heartbeat(ctx, a, cancel)
	}()
	defer func() { cancel(nil); <-hbDone }()

	dir, err := os.MkdirTemp("", "agl-attempt-")
	if err != nil {
		c.complete(a, store.AttemptFailed, "controller: "+err.Error())
		return
	}
	defer os.RemoveAll(dir)
	a.dir = dir
	a.outPath, a.errPath = filepath.Join(dir, "stdout.log"), filepath.Join(dir, "stderr.log")
	rewardPath := filepath.Join(dir, "reward")
	if err := os.WriteFile(rewardPath, nil, 0o600); err != nil {
		c.complete(a, store.AttemptFailed, "controller: "+err.Error())
		return
	}
	env, argv, err := c.alHarness(claim, c.env(claim, rewardPath))
	if err == nil && len(argv) == 0 {
		err = errors.New("no harness command configured (controller.command), and the rollout is no Agent Lightning rollout with config.local.agent_class")
	}
	if err != nil {
		c.complete(a, store.AttemptFailed, "controller: "+err.Error())
		return
	}
	a.env, a.argv = env, argv
	defer c.cleanupRepo(a)
	if err := c.prepareRepo(ctx, a); err != nil {
		c.complete(a, store.AttemptFailed, "controller: "+err.Error())
		return
	}

	outF, err1 := os.Create(a.outPath)
	errF, err2 := os.Create(a.errPath)
	if err := errors.Join(err1, err2); err != nil {
		closeAll(outF, errF)
		c.complete(a, store.AttemptFailed, "controller: "+err.Error())
		return
	}
	cmd, err := c.harnessCommand(a)
	if err != nil {
		closeAll(outF, errF)
		c.complete(a, store.AttemptFailed, "controller: "+err.Error())
		return
	}
	cmd.Stdout, cmd.Stderr = outF, errF
	if a.repo != nil && c.cfg.Sandbox.Harness == HarnessOutside {
		// Bounded like the inside harness's (sandbox.harness_output_bytes).
		if a.repo.output, err = boundOutput(cmd, outF, errF, c.cfg.Sandbox.HarnessOutputBytes); err != nil {
			closeAll(outF, errF)
			c.complete(a, store.AttemptFailed, "controller: "+err.Error())
			return
		}
	}
	setGroup(cmd)
	err = procs.start(cmd)
	if a.repo != nil && a.repo.output != nil {
		a.repo.output.started() // the copiers hold the log files
	} else {
		closeAll(outF, errF) // the child holds its own copies
	}
	if err != nil {
		c.complete(a, store.AttemptFailed, "start harness: "+err.Error())
		return
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		procs.remove(pid)
		exited <- err
	}()

	var deadline <-chan time.Time
	timeout := time.Duration(claim.Rollout.Config.TimeoutSeconds * float64(time.Second))
	if a.repo != nil {
		timeout = a.repo.timeout(timeout)
	}
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}

	select {
	case werr := <-exited:
		c.harnessEnded(a, pid)
		if a.repo != nil && a.repo.output != nil {
			a.repo.output.wait(10 * time.Second)
		}
		c.finish(ctx, a, werr)
	case <-deadline:
		c.revoke(a)
		signalGroup(pid, syscall.SIGTERM)
		msg := fmt.Sprintf("timeout: killed after %s", timeout)
		a.log.Info("controller: attempt timed out, killing its process group", "timeout", timeout)
		// Record and complete before waiting for the group to die, so that
		// the store's reaper does not time the attempt out meanwhile.
		c.appendLogs(ctx, a)
		c.complete(a, store.AttemptFailed, msg)
		c.reap(pid, exited)
		c.sweep(a)
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), errLost) {
			a.log.Info("controller: attempt ended elsewhere, killing its process group")
			signalGroup(pid, syscall.SIGKILL)
			<-exited
			c.sweep(a)
			return
		}
		c.revoke(a)
		signalGroup(pid, syscall.SIGTERM)
		c.reap(pid, exited)
		c.sweep(a)
		c.appendLogs(context.Background(), a)
		c.complete(a, store.AttemptFailed, store.AttemptStopped)
	}
}

// harnessEnded runs the moment the harness exits by itself: its key dies
// (so nothing it left behind can post a reward any more), then every
// process it left behind is killed, before logs are read and the
// evaluator runs.
func (c *runner) harnessEnded(a *attempt, pid int) {
	c.revoke(a)
	signalGroup(pid, syscall.SIGKILL)
	c.sweep(a)
}

// revoke kills the attempt's scoped key at the gateway. A failure is
// logged: the reward ranks (store.Reward.Rank) still keep an evaluator's
// reward authoritative.
func (c *runner) revoke(a *attempt) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.api.RevokeKey(ctx, a.rid, a.aid); err != nil {
		a.log.Warn("controller: revoke the attempt's key", "err", err)
	}
}

// sweep kills whatever processes the attempt left behind (see the
// package-level sweep).
func (c *runner) sweep(a *attempt) {
	// No harness or evaluator is being started meanwhile: between fork
	// and exec a child shows the controller's environment in its own
	// group, and would pass for a left-behind process.
	procs.starting.Lock()
	n := sweep(a.aid, procs.running, procs.live)
	procs.starting.Unlock()
	if n > 0 {
		a.log.Info("controller: killed processes the attempt left behind", "processes", n)
	}
}

// heartbeat reports the attempt alive until ctx ends; a 409 or 404 answer
// cancels the attempt with errLost.
func (c *runner) heartbeat(ctx context.Context, a *attempt, cancel context.CancelCauseFunc) {
	t := time.NewTicker(c.heartbeatEvery(a.claim))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := c.api.Heartbeat(ctx, a.rid, a.aid)
		var ae *api.Error
		switch {
		case err == nil:
		case errors.As(err, &ae) && (ae.Status == http.StatusConflict || ae.Status == http.StatusNotFound):
			cancel(errLost)
			return
		case ctx.Err() == nil:
			a.log.Warn("controller: heartbeat failed", "err", err)
		}
	}
}

// finish handles a harness that exited by itself: logs, reward, completion.
func (c *runner) finish(ctx context.Context, a *attempt, werr error) {
	c.keepWorkspace(a) // before the attempt completes: whoever sees it ended finds the copy
	c.appendLogs(ctx, a)
	code := exitCode(werr)
	if werr != nil {
		msg := exitMessage(werr)
		if line := lastLine(a.redact(readTail(a.errPath, c.cfg.LogTailBytes))); line != "" {
			msg += ": " + line
		}
		c.complete(a, store.AttemptFailed, msg)
		return
	}
	if err := c.reward(ctx, a, code); err != nil {
		if errors.Is(context.Cause(ctx), errLost) {
			return
		}
		c.complete(a, store.AttemptFailed, a.redact(err.Error()))
		return
	}
	c.complete(a, store.AttemptSucceeded, "")
}

func (c *runner) append(ctx context.Context, a *attempt, evs ...store.NewEvent) error {
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.api.AppendEvents(ctx, a.rid, a.aid, evs); err != nil {
		return fmt.Errorf("controller: append %s event: %w", evs[0].Type, err)
	}
	return nil
}

// complete ends the attempt, once. Transport errors are retried (a lost
// answer to a call that did land is then answered 409, which means done);
// any answer from the gateway ends the matter.
func (c *runner) complete(a *attempt, st store.AttemptStatus, msg string) {
	msg = truncate(msg, 1000)
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := c.api.Complete(ctx, a.rid, a.aid, st, msg)
		cancel()
		var ae *api.Error
		switch {
		case err == nil:
			// Successes are routine (one per rollout); failures are news.
			level := slog.LevelInfo
			if st == store.AttemptSucceeded {
				level = slog.LevelDebug
			}
			a.log.Log(context.Background(), level, "controller: attempt completed", "status", st, "error", msg, "rollout_status", r.Status)
			return
		case errors.As(err, &ae):
			if ae.Status == http.StatusConflict {
				a.log.Info("controller: attempt had already ended", "status", st, "err", err)
			} else {
				a.log.Error("controller: complete attempt refused", "status", st, "err", err)
			}
			return
		case try >= 4:
			a.log.Error("controller: complete attempt failed, the reaper will end it", "status", st, "err", err)
			return
		}
		time.Sleep(time.Duration(200<<try) * time.Millisecond)
	}
}

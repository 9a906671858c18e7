package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// Kinds of controller (the controller section's kind).
const (
	// KindLocal runs the harness as a local subprocess (Run).
	KindLocal = "local"
	// KindKubernetes runs one Kubernetes Job per attempt
	// (controller/kubernetes, on Serve).
	KindKubernetes = "kubernetes"
)

// Backend runs claimed attempts somewhere other than a local subprocess
// (controller/kubernetes). Serve claims; the backend launches, watches and
// ends each attempt through the Attempt's methods, which hold the local
// controller's rules: the env contract, heartbeats, log redaction, the
// reward source and completing exactly once.
type Backend interface {
	// RunAttempt runs one attempt until it has ended (Attempt.Finish) or
	// has been lost (Attempt.Heartbeat returned ErrLost). ctx ends when
	// the controller stops: the backend then stops the harness and
	// finishes the attempt with Result{Failure: store.AttemptStopped}.
	RunAttempt(ctx context.Context, at *Attempt)
}

// ErrLost is returned by Attempt.Heartbeat when the attempt ended
// elsewhere (cancelled, reaped: the gateway answered 409 or 404).
var ErrLost = errLost

// Serve claims rollouts like Run and hands each attempt to b, at most
// Concurrency at once, until ctx ends. Config.Command may be empty (the
// backend may carry its own); the evaluator and reward source rules are
// those of Run.
func Serve(ctx context.Context, cfg Config, b Backend) error {
	cfg, err := cfg.defaults()
	if err != nil {
		return err
	}
	c := cfg.newRunner()
	return c.claimLoop(ctx, func(ctx context.Context, claim store.Claim) {
		at, err := c.newAttempt(claim)
		if err != nil {
			c.complete(at.a, store.AttemptFailed, "controller: "+err.Error())
			return
		}
		defer at.close()
		// The evaluator runs here: its sweep must spare the processes of
		// the other attempts' evaluators.
		procs.begin(at.a.aid)
		defer procs.end(at.a.aid)
		b.RunAttempt(ctx, at)
	})
}

func (cfg Config) newRunner() *runner {
	cl := api.NewClient(cfg.GatewayURL, cfg.AdminKey)
	if cfg.HTTP != nil {
		cl.HTTP = cfg.HTTP
	}
	// The gateway doors' own pool of connections (inside.go), apart from
	// the controller's client.
	door := http.DefaultTransport.(*http.Transport).Clone()
	door.MaxConnsPerHost = cfg.Sandbox.DoorUpstreamConns
	door.MaxIdleConnsPerHost = cfg.Sandbox.DoorRequests
	return &runner{cfg: cfg, api: cl, log: cfg.Logger, python: sync.OnceValue(pythonInfo), door: door}
}

// claimLoop claims attempts and runs each with run, at most Concurrency at
// once, until ctx ends; it waits for the running ones before returning.
func (c *runner) claimLoop(ctx context.Context, run func(context.Context, store.Claim)) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, c.cfg.Concurrency)
	backoff := c.cfg.PollInterval
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		claim, ok, err := c.api.Claim(ctx, store.ClaimRequest{WorkerID: c.cfg.WorkerID, Mode: c.cfg.Mode})
		if err != nil {
			<-slots
			if ctx.Err() != nil {
				return nil
			}
			var ae *api.Error
			if errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden || ae.Status == http.StatusNotFound) {
				return fmt.Errorf("controller: claim: %w", err)
			}
			c.log.Warn("controller: claim failed", "err", err, "retry_in", backoff)
			if !sleep(ctx, backoff) {
				return nil
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = c.cfg.PollInterval
		if !ok {
			<-slots
			if !sleep(ctx, c.cfg.PollInterval) {
				return nil
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			run(ctx, claim)
		}()
	}
}

// Attempt is one claimed attempt handed to a Backend.
type Attempt struct {
	c *runner
	a *attempt
	// finished is set by Finish: an attempt completes once.
	finished bool
}

func (c *runner) newAttempt(claim store.Claim) (*Attempt, error) {
	a := &attempt{claim: claim, rid: claim.Rollout.ID, aid: claim.Attempt.ID}
	a.log = c.log.With("rollout", a.rid, "attempt", a.aid)
	a.secrets = []string{claim.Key, c.cfg.AdminKey}
	at := &Attempt{c: c, a: a}
	dir, err := os.MkdirTemp("", "agl-attempt-")
	if err != nil {
		return at, err
	}
	a.dir = dir
	a.outPath, a.errPath = filepath.Join(dir, "stdout.log"), filepath.Join(dir, "stderr.log")
	// The evaluator runs here, on the controller's machine, with the local
	// environment; the harness's own environment is Attempt.Env.
	a.env = c.env(claim, filepath.Join(dir, "reward"))
	return at, nil
}

func (at *Attempt) close() {
	if at.a.dir != "" {
		os.RemoveAll(at.a.dir)
	}
}

// Claim is the claimed rollout, attempt and scoped key.
func (at *Attempt) Claim() store.Claim { return at.a.claim }

// Logger logs with the rollout and attempt ids.
func (at *Attempt) Logger() *slog.Logger { return at.a.log }

// Command is the configured harness command (may be empty for a backend).
func (at *Attempt) Command() []string { return at.c.cfg.Command }

// Env is the harness's environment contract (see the package doc), the
// configured extra entries first, as KEY=VALUE: gatewayURL is the gateway
// as the harness reaches it ("" = the controller's GatewayURL) and
// rewardFile the path the harness may write its reward to. Nothing of the
// controller's own environment is in it.
func (at *Attempt) Env(gatewayURL, rewardFile string) []string {
	if gatewayURL == "" {
		gatewayURL = at.c.cfg.GatewayURL
	}
	env := at.c.contractEnv(gatewayURL, at.a.claim, rewardFile)
	// An Agent Lightning rollout's agent also gets AL's variables, as AL's
	// Kubernetes reconciler sets them.
	return append(env, at.c.alVars(gatewayURL, at.a.claim)...)
}

// ALJobTemplate is an Agent Lightning rollout's config.k8s.job_template
// (AL's Jinja Job template), if it has one.
func (at *Attempt) ALJobTemplate() (string, bool) {
	spec, ok := api.ALSpec(at.a.claim.Rollout.Metadata)
	if !ok || spec.K8s == nil || spec.K8s.JobTemplate == nil || *spec.K8s.JobTemplate == "" {
		return "", false
	}
	return *spec.K8s.JobTemplate, true
}

// HeartbeatInterval is how often the attempt should heartbeat: the
// configured interval, shortened to a third of the rollout's unresponsive
// limit.
func (at *Attempt) HeartbeatInterval() time.Duration {
	return at.c.heartbeatEvery(at.a.claim)
}

// Heartbeat reports the attempt alive once. It returns ErrLost when the
// attempt ended elsewhere (the backend then stops the harness and must not
// finish the attempt), another error when the gateway could not be
// reached.
func (at *Attempt) Heartbeat(ctx context.Context) error {
	_, err := at.c.api.Heartbeat(ctx, at.a.rid, at.a.aid)
	var ae *api.Error
	if errors.As(err, &ae) && (ae.Status == http.StatusConflict || ae.Status == http.StatusNotFound) {
		return ErrLost
	}
	return err
}

// Revoke kills the attempt's scoped key at the gateway (failures logged).
func (at *Attempt) Revoke() { at.c.revoke(at.a) }

// Redact replaces the attempt's key, the admin key and anything shaped
// like a scoped key with "[REDACTED]".
func (at *Attempt) Redact(s string) string { return at.a.redact(s) }

// Log is one output tail of a harness.
type Log struct {
	// Stream names the output ("stdout", "stderr", or a container's name).
	Stream string
	// Text is the tail as read (it is redacted and bounded by Finish).
	Text string
	// Bytes is the stream's size when known, else len(Text).
	Bytes int64
	// Truncated says Text is not the whole stream.
	Truncated bool
}

// Result is how an attempt's harness ended.
type Result struct {
	// Failure, when not empty, fails the attempt with this message (it is
	// redacted); empty means the harness succeeded and its reward is
	// collected from the configured source.
	Failure string
	// ExitCode is the harness's exit code (AGL_EXIT_CODE of the evaluator).
	ExitCode int
	// RewardFile is what the harness wrote to its reward file (empty: none).
	RewardFile []byte
	// Logs are appended as one "log" event each (those not empty),
	// redacted, each bounded to LogTailBytes. The first is the harness's
	// own: the evaluator's AGL_LOG_FILE.
	Logs []Log
	// LastLine appends the last line of the first log to a Failure, as
	// the local controller appends the last stderr line.
	LastLine bool
}

// Finish records the attempt's logs and reward and completes it, once;
// the harness must have ended and its key must be revoked (Revoke).
func (at *Attempt) Finish(ctx context.Context, r Result) {
	if at.finished {
		return
	}
	at.finished = true
	c, a := at.c, at.a
	c.appendTails(ctx, a, r.Logs)
	if r.Failure != "" {
		if r.LastLine && len(r.Logs) > 0 {
			if line := lastLine(r.Logs[0].Text); line != "" {
				r.Failure += ": " + line
			}
		}
		c.complete(a, store.AttemptFailed, a.redact(r.Failure))
		return
	}
	if err := at.stage(r); err != nil {
		c.complete(a, store.AttemptFailed, "controller: "+err.Error())
		return
	}
	if err := c.reward(ctx, a, r.ExitCode); err != nil {
		c.complete(a, store.AttemptFailed, a.redact(err.Error()))
		return
	}
	c.complete(a, store.AttemptSucceeded, "")
}

// stage writes the reward file and the first log where reward and the
// evaluator read them.
func (at *Attempt) stage(r Result) error {
	a := at.a
	if a.dir == "" {
		return errors.New("no attempt directory")
	}
	if err := os.WriteFile(filepath.Join(a.dir, "reward"), r.RewardFile, 0o600); err != nil {
		return err
	}
	var out string
	if len(r.Logs) > 0 {
		out = r.Logs[0].Text
	}
	if err := os.WriteFile(a.outPath, []byte(out), 0o600); err != nil {
		return err
	}
	return os.WriteFile(a.errPath, nil, 0o600)
}

// appendTails appends logs as "log" events, redacted and bounded like the
// local controller's.
func (c *runner) appendTails(ctx context.Context, a *attempt, logs []Log) {
	var evs []store.NewEvent
	for _, l := range logs {
		if l.Text == "" {
			continue
		}
		text := a.redact(l.Text)
		truncated := l.Truncated
		if len(text) > c.cfg.LogTailBytes {
			text = runeStart(text[len(text)-c.cfg.LogTailBytes:])
			truncated = true
		}
		size := l.Bytes
		if size < int64(len(l.Text)) {
			size = int64(len(l.Text))
		}
		d, err := json.Marshal(logData{Stream: l.Stream, Text: text, Bytes: size, Truncated: truncated})
		if err != nil {
			continue
		}
		evs = append(evs, store.NewEvent{Type: store.EventLog, Data: d})
	}
	if len(evs) == 0 {
		return
	}
	if err := c.append(ctx, a, evs...); err != nil {
		a.log.Warn("controller: append log events", "err", err)
	}
}

// contractEnv is the agl part of a harness's environment: the configured
// extra entries, then the contract variables, with gw as the gateway root.
func (c *runner) contractEnv(gw string, claim store.Claim, rewardPath string) []string {
	base := gw + "/r/" + url.PathEscape(claim.Rollout.ID) + "/" + url.PathEscape(claim.Attempt.ID)
	env := append([]string(nil), c.cfg.Env...)
	task := string(claim.Rollout.Task)
	if task == "" {
		task = "null"
	}
	return append(env,
		"OPENAI_BASE_URL="+base+"/v1",
		"ANTHROPIC_BASE_URL="+base,
		"GOOGLE_GEMINI_BASE_URL="+base,
		"OPENAI_API_KEY="+claim.Key,
		"ANTHROPIC_API_KEY="+claim.Key,
		"GEMINI_API_KEY="+claim.Key,
		"AGL_TASK="+task,
		"AGL_REWARD_FILE="+rewardPath,
		"AGL_EVENTS_URL="+base+"/events",
		"AGL_ROLLOUT_ID="+claim.Rollout.ID,
		"AGL_ATTEMPT_ID="+claim.Attempt.ID,
		"AGL_MODE="+string(claim.Rollout.Mode),
	)
}

// heartbeatEvery is the heartbeat interval of claim's attempt: well within
// the rollout's unresponsive limit, whatever the config.
func (c *runner) heartbeatEvery(claim store.Claim) time.Duration {
	every := c.cfg.HeartbeatInterval
	if u := time.Duration(claim.Rollout.Config.UnresponsiveSeconds * float64(time.Second)); u > 0 && every > u/3 {
		every = max(u/3, 10*time.Millisecond)
	}
	return every
}

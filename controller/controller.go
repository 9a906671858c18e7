// Package controller runs agent harnesses for agl (local mode): it claims
// queued rollouts from a gateway and runs the configured harness command as
// a subprocess per attempt, in its own process group, with the environment
// contract of DESIGN.md:
//
//	OPENAI_BASE_URL    = GW/r/{rollout}/{attempt}/v1
//	ANTHROPIC_BASE_URL = GW/r/{rollout}/{attempt}
//	GOOGLE_GEMINI_BASE_URL = GW/r/{rollout}/{attempt} (the Gemini API: …/v1beta/models/…)
//	OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY = the attempt's scoped key
//	AGL_TASK           = the task JSON
//	AGL_REWARD_FILE    = a file the harness may write its reward to
//	AGL_EVENTS_URL     = GW/r/{rollout}/{attempt}/events (POST reward/custom events)
//	AGL_ROLLOUT_ID, AGL_ATTEMPT_ID, AGL_MODE
//
// The inherited environment never carries AGL_ADMIN_KEY to the harness.
//
// While the harness runs, the controller heartbeats the attempt; a heartbeat
// answered 409 means the attempt ended elsewhere (cancelled, reaped), and the
// process group is killed without completing the attempt. A harness running
// past its rollout's timeout_seconds gets SIGTERM on its whole process group
// (SIGKILL after KillGrace) and the attempt fails with "timeout …".
//
// The moment the harness exits, its scoped key is revoked at the gateway
// and every process it left behind is killed — its process group, and,
// the controller being the child subreaper (Linux), processes that left
// the group (setsid, double fork) too — so that nothing the harness
// started can post a reward afterwards. Then the last LogTailBytes of its
// stdout and of its stderr are appended as one "log" event each
// ({"stream","text","bytes","truncated"}), with the attempt's key, the
// admin key and anything shaped like a scoped key replaced by
// "[REDACTED]".
//
// The reward comes from Config.RewardSource:
//
//   - harness: a non-empty reward file (a JSON number or an store.Reward
//     object) is appended as a reward event with source "reward_file",
//     which outranks the reward events the harness posted to
//     AGL_EVENTS_URL; without one, the newest final reward event counts.
//   - evaluator: the Evaluator command runs with the same environment plus
//     AGL_LOG_FILE (the harness's full stdout), AGL_STDERR_FILE and
//     AGL_EXIT_CODE, and its stdout (or its last line) is parsed like the
//     reward file and appended with source "evaluator", which outranks
//     every reward the harness sent, final or per call, whenever it
//     arrived (store.Reward.Rank). A non-empty reward file is kept as a
//     "harness_reward" event, a diagnostic.
//   - both: the harness's final reward (file, else an event without
//     call_id) when it sent one; else the evaluator's.
//
// Then the attempt is completed exactly once: exit 0 → succeeded;
// otherwise failed with "exit status N: <last stderr line>", which the
// store retries up to the rollout's max_attempts.
//
// A harness that exits 0 without any reward still completes as succeeded:
// its rollout then has no reward summary, and what to do with it (drop it,
// count it as zero) is the trainer's decision. An unreadable reward (bad
// reward file, failing evaluator) fails the attempt instead.
package controller

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/sandbox"
)

// Run claims and runs rollouts until ctx ends. On cancellation it kills the
// running harnesses, fails their attempts (store.AttemptStopped, so that they are
// requeued at once) and returns nil. It returns an error only for a
// configuration the gateway refuses (bad URL, wrong admin key).
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	c := cfg.newRunner()
	if err := becomeSubreaper(); err != nil {
		c.log.Warn("controller: cannot become the child subreaper: processes a harness detaches (setsid) may outlive its attempt", "err", err)
	}
	c.log.Info("controller: repository tasks' sandboxes bound memory and processes with", "cgroups", sandbox.CgroupBackend())
	defer c.door.CloseIdleConnections()
	return c.claimLoop(ctx, c.runAttempt)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

type runner struct {
	cfg Config
	api *api.Client
	log *slog.Logger
	// python is what the test workspace's filter knows of Python (module
	// names a repository's workspace may not add at its top level, see
	// repo.go), computed once.
	python func() pythonNames
	// door carries every gateway door's requests to the gateway, with
	// at most sandbox.door_upstream_conns connections.
	door *http.Transport
}

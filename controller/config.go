package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aglrl/agl/store"
)

// Config configures Run. Zero values take the documented defaults.
type Config struct {
	// GatewayURL is the gateway root, e.g. http://127.0.0.1:8080.
	GatewayURL string
	// AdminKey authenticates claims, heartbeats and completions.
	AdminKey string
	// Command is the harness: program and arguments (required). A program
	// name without a slash is looked up in PATH; "./x" is relative to Dir.
	Command []string
	// Dir is the harness's working directory ("" = the controller's).
	Dir string
	// Env holds extra KEY=VALUE entries added to the inherited environment
	// (the agl variables above override them).
	Env []string
	// Concurrency bounds the attempts run at once (default 1).
	Concurrency int
	// WorkerID names this controller in claims (default host-pid).
	WorkerID string
	// Mode, if set, claims only rollouts of that mode.
	Mode store.Mode
	// HeartbeatInterval is how often a running attempt heartbeats
	// (default 10s).
	HeartbeatInterval time.Duration
	// PollInterval is how long to wait when nothing is queued (default 500ms).
	PollInterval time.Duration
	// Evaluator, if set, is run after a harness exiting 0 (see
	// RewardSource); its stdout is the reward.
	Evaluator []string
	// RewardSource says whose reward the rollout gets: RewardHarness,
	// RewardEvaluator or RewardBoth (default: evaluator when an Evaluator
	// is configured, else harness).
	RewardSource string
	// EvaluatorTimeout bounds the evaluator (default 60s).
	EvaluatorTimeout time.Duration
	// LogTailBytes is how much of each output stream is kept (default 4096).
	LogTailBytes int
	// KillGrace is the wait between SIGTERM and SIGKILL (default 5s).
	KillGrace time.Duration
	// Logger receives the controller's own logs (default slog.Default()).
	Logger *slog.Logger
	// HTTP is the client used to reach the gateway (default: 90s timeout).
	HTTP *http.Client
	// ALPrefix is where the gateway serves Agent Lightning's API (default
	// /al), for the environment of AL rollouts (al.go); Python runs AL's
	// agent classes (default python3).
	ALPrefix string
	Python   string
	// Sandbox and Tests configure repository tasks (see repo.go): tasks
	// with a "repo" field run in a sandbox and get the test-based reward,
	// whatever RewardSource says.
	Sandbox SandboxConfig
	Tests   TestsConfig
	// Agl is the agl executable behind AGL_SANDBOX_EXEC (`agl sandbox
	// exec`; default os.Executable()).
	Agl string
}

// Reward sources (Config.RewardSource).
const (
	// RewardHarness: the harness's reward — its reward file when not
	// empty, else the newest final reward event it posted. No evaluator.
	RewardHarness = "harness"
	// RewardEvaluator: the evaluator's reward, always; whatever the
	// harness sent (reward file, reward events, per-call rewards) is kept
	// as diagnostics and never used.
	RewardEvaluator = "evaluator"
	// RewardBoth: the harness's reward when it sent a final one (reward
	// file or a reward event without call_id), else the evaluator's.
	RewardBoth = "both"
)

func (c Config) withDefaults() (Config, error) {
	if len(c.Command) > 0 && c.Command[0] == "" {
		return c, errors.New("controller: the harness command's program is empty")
	}
	return c.defaults()
}

// defaults checks and completes everything but the command (a Backend may
// carry its own).
func (c Config) defaults() (Config, error) {
	if c.ALPrefix == "" {
		c.ALPrefix = DefaultALPrefix
	}
	c.ALPrefix = "/" + strings.Trim(c.ALPrefix, "/")
	if c.Python == "" {
		c.Python = "python3"
	}
	if c.GatewayURL == "" {
		return c, errors.New("controller: no gateway URL configured")
	}
	if _, err := url.Parse(c.GatewayURL); err != nil {
		return c, fmt.Errorf("controller: gateway URL: %w", err)
	}
	if c.Mode != "" && !c.Mode.Valid() {
		return c, fmt.Errorf("controller: mode %q: want train or val", c.Mode)
	}
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return c, fmt.Errorf("controller: env entry %q: want KEY=VALUE", kv)
		}
	}
	if c.RewardSource == "" {
		c.RewardSource = RewardHarness
		if len(c.Evaluator) > 0 {
			c.RewardSource = RewardEvaluator
		}
	}
	switch c.RewardSource {
	case RewardHarness:
		if len(c.Evaluator) > 0 {
			return c, errors.New("controller: reward_source harness never runs the evaluator: set reward_source evaluator or both, or drop the evaluator")
		}
	case RewardEvaluator, RewardBoth:
		if len(c.Evaluator) == 0 {
			return c, fmt.Errorf("controller: reward_source %s needs an evaluator", c.RewardSource)
		}
	default:
		return c, fmt.Errorf("controller: reward_source %q: want harness, evaluator or both", c.RewardSource)
	}
	c.GatewayURL = strings.TrimRight(c.GatewayURL, "/")
	if c.Concurrency <= 0 {
		c.Concurrency = 1
	}
	if c.WorkerID == "" {
		h, _ := os.Hostname()
		if h == "" {
			h = "controller"
		}
		c.WorkerID = h + "-" + strconv.Itoa(os.Getpid())
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 500 * time.Millisecond
	}
	if c.EvaluatorTimeout <= 0 {
		c.EvaluatorTimeout = 60 * time.Second
	}
	if c.LogTailBytes <= 0 {
		c.LogTailBytes = 4096
	}
	if c.KillGrace <= 0 {
		c.KillGrace = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c.repoDefaults()
}

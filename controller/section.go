package controller

import (
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/aglrl/agl/store"
	"go.yaml.in/yaml/v3"
)

// Section is the "controller:" section of agl.yaml:
//
//	controller:
//	  kind: local                      # local (subprocesses) | kubernetes (one Job per attempt)
//	  command: [python3, harness.py]   # the harness, run once per attempt
//	  dir: .                           # relative to the config file
//	  env: {CALC_DIGITS: "3"}
//	  concurrency: 4
//	  mode: train                      # claim only this mode (optional)
//	  evaluator: [python3, score.py]   # optional
//	  reward_source: evaluator         # harness | evaluator | both (default: evaluator with an evaluator, else harness)
//	  heartbeat_interval: 10s
//	  poll_interval: 500ms
//	  evaluator_timeout: 60s
//	  log_tail_bytes: 4096
//	  kill_grace: 5s
//	  al_prefix: /al                   # where the gateway serves Agent Lightning's API
//	  python: python3                  # runs AL rollouts' config.local.agent_class
//	  sandbox:                         # repository tasks (tasks with "repo"); see controller/repo.go
//	    harness: outside               # outside (AGL_SANDBOX_EXEC) | inside (the harness runs in the sandbox)
//	    timeout: 60s                   # wall time per command
//	    cpu_seconds: 120               # CPU time per process (default 2x timeout)
//	    memory_bytes: 2147483648       # per command (cgroup v1 memory or v2 memory.max; else RLIMIT_AS)
//	    processes: 256                 # per command (cgroup v1 pids or v2 pids.max; else RLIMIT_NPROC)
//	    disk_bytes: 1073741824         # the workspace (a tmpfs when root) and /tmp, each
//	    output_bytes: 1048576          # stdout and stderr, each, per command
//	    read_only: [/opt/tool]         # extra host paths bound read-only (relative: to the config file)
//	    env: {PYTHONDONTWRITEBYTECODE: "1"}
//	    keep_workspaces: kept          # copy final workspaces here (default: removed)
//	    bwrap: bwrap
//	  tests:                           # the test-based reward of repository tasks
//	    timeout: 300s
//	    partial_credit: false          # true: fraction of fail_to_pass passing, 0 if a pass_to_pass fails
//	    log_tail_bytes: 8192
//	    copy_timeout: 60s              # bounds the copy of the final workspace (its size: disk_bytes)
//	    copy_max_files: 100000         # files and directories; past a bound: not tested, reward 0
//	  kubernetes: {…}                  # kind kubernetes only (controller/kubernetes.Section)
type Section struct {
	Kind              string            `yaml:"kind"`
	Command           []string          `yaml:"command"`
	Dir               string            `yaml:"dir"`
	Env               map[string]string `yaml:"env"`
	Concurrency       int               `yaml:"concurrency"`
	Worker            string            `yaml:"worker"`
	Mode              store.Mode        `yaml:"mode"`
	Evaluator         []string          `yaml:"evaluator"`
	RewardSource      string            `yaml:"reward_source"`
	HeartbeatInterval time.Duration     `yaml:"heartbeat_interval"`
	PollInterval      time.Duration     `yaml:"poll_interval"`
	EvaluatorTimeout  time.Duration     `yaml:"evaluator_timeout"`
	LogTailBytes      int               `yaml:"log_tail_bytes"`
	KillGrace         time.Duration     `yaml:"kill_grace"`
	// ALPrefix and Python: see Config.
	ALPrefix string         `yaml:"al_prefix"`
	Python   string         `yaml:"python"`
	Sandbox  SandboxSection `yaml:"sandbox"`
	Tests    TestsConfig    `yaml:"tests"`
	// Kubernetes is decoded by controller/kubernetes (kept raw here, so
	// that this package does not depend on client-go).
	Kubernetes yaml.Node `yaml:"kubernetes"`
}

// SandboxSection is the "sandbox:" part of the controller section.
type SandboxSection struct {
	SandboxConfig `yaml:",inline"`
	Env           map[string]string `yaml:"env"`
}

// Config returns the run configuration the section describes (without the
// gateway URL and key). A relative dir is resolved against base, the
// directory of the config file; no dir means base itself.
func (s Section) Config(base string) Config {
	dir := s.Dir
	if base != "" && !filepath.IsAbs(dir) {
		dir = filepath.Join(base, dir)
	}
	sb := s.Sandbox.SandboxConfig
	sb.Env = envList(s.Sandbox.Env)
	if sb.KeepWorkspaces != "" && base != "" && !filepath.IsAbs(sb.KeepWorkspaces) {
		sb.KeepWorkspaces = filepath.Join(base, sb.KeepWorkspaces)
	}
	// A relative read_only path is relative to the config file too (the
	// sandbox binds absolute paths).
	sb.ReadOnly = slices.Clone(sb.ReadOnly)
	for i, p := range sb.ReadOnly {
		if base != "" && !filepath.IsAbs(p) {
			if abs, err := filepath.Abs(filepath.Join(base, p)); err == nil {
				sb.ReadOnly[i] = abs
			}
		}
	}
	return Config{
		Command: s.Command, Dir: dir, Env: envList(s.Env), Concurrency: s.Concurrency, WorkerID: s.Worker, Mode: s.Mode,
		Evaluator: s.Evaluator, RewardSource: s.RewardSource, HeartbeatInterval: s.HeartbeatInterval, PollInterval: s.PollInterval,
		EvaluatorTimeout: s.EvaluatorTimeout, LogTailBytes: s.LogTailBytes, KillGrace: s.KillGrace,
		Sandbox: sb, Tests: s.Tests, ALPrefix: s.ALPrefix, Python: s.Python,
	}
}

// envList turns a map into sorted KEY=VALUE entries.
func envList(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var env []string
	for _, k := range keys {
		env = append(env, k+"="+m[k])
	}
	return env
}

package controller

import (
	"path/filepath"
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
	// Kubernetes is decoded by controller/kubernetes (kept raw here, so
	// that this package does not depend on client-go).
	Kubernetes yaml.Node `yaml:"kubernetes"`
}

// Config returns the run configuration the section describes (without the
// gateway URL and key). A relative dir is resolved against base, the
// directory of the config file; no dir means base itself.
func (s Section) Config(base string) Config {
	dir := s.Dir
	if base != "" && !filepath.IsAbs(dir) {
		dir = filepath.Join(base, dir)
	}
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var env []string
	for _, k := range keys {
		env = append(env, k+"="+s.Env[k])
	}
	return Config{
		Command: s.Command, Dir: dir, Env: env, Concurrency: s.Concurrency, WorkerID: s.Worker, Mode: s.Mode,
		Evaluator: s.Evaluator, RewardSource: s.RewardSource, HeartbeatInterval: s.HeartbeatInterval, PollInterval: s.PollInterval,
		EvaluatorTimeout: s.EvaluatorTimeout, LogTailBytes: s.LogTailBytes, KillGrace: s.KillGrace,
	}
}

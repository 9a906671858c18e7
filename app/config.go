// Package app assembles agl from one config: the store (metrics observing
// it), the policies and engines, the proxy, the gateway with every mount
// (store API, LLM routes, /r, /al, OTLP, dashboard, /metrics, the model
// registry sync), the controller and the trainer. The commands of
// cmd/agl are flag front-ends over it, so that a config key means the
// same in every command.
package app

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/aglrl/agl/config"
	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/gateway/al"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/trainer"
)

// Config is a whole config file, every section decoded once.
type Config struct {
	config.Config
	// Path is the config file ("" for none), for messages.
	Path string
	// Base is the config file's folder: relative paths of the sections
	// (engine.model_dir, policies.*.model_dir, trainer.tasks and
	// val_tasks, controller.dir) are relative to it. "" for no file.
	Base       string
	Engine     EngineConfig
	Policies   map[string]PolicyConfig // nil without a policies: section
	Proxy      proxy.Config
	Controller controller.Section
	Trainer    trainer.Config
	AL         al.Config
}

// Load reads the config file at path ("" : the defaults and the
// environment) and decodes its sections.
func Load(path string) (Config, error) {
	c, err := config.Load(path)
	if err != nil {
		return Config{}, err
	}
	base := ""
	if path != "" {
		base = filepath.Dir(path)
	}
	out, err := Decode(c, base)
	out.Path = path
	return out, err
}

// Decode decodes the sections of c, whose file lies in base: unknown
// keys are errors. The proxy's limits come from the gateway section
// (gateway.max_abs_reward, max_stored_call_bytes,
// max_stored_attempt_bytes), and relative paths (those of Base's list and
// policies.*.upstream.models[].tokenizer_dir) are resolved against base.
func Decode(c config.Config, base string) (Config, error) {
	out := Config{Config: c, Base: base}
	for _, s := range []struct {
		name string
		v    any
	}{{"engine", &out.Engine}, {"policies", &out.Policies}, {"proxy", &out.Proxy},
		{"controller", &out.Controller}, {"trainer", &out.Trainer}, {"al", &out.AL}} {
		if err := c.Section(s.name, s.v); err != nil {
			return Config{}, err
		}
	}
	out.Proxy.MaxAbsReward = c.Gateway.MaxAbsReward
	out.Proxy.StoredCallBytes, out.Proxy.StoredAttemptBytes = c.Gateway.MaxStoredCallBytes, c.Gateway.MaxStoredAttemptBytes
	out.Engine.ModelDir = out.rel(out.Engine.ModelDir)
	out.Trainer.Tasks, out.Trainer.ValTasks = out.rel(out.Trainer.Tasks), out.rel(out.Trainer.ValTasks)
	for n, p := range out.Policies {
		p.ModelDir = out.rel(p.ModelDir)
		if p.Upstream != nil {
			u := *p.Upstream
			u.Models = slices.Clone(u.Models)
			for i := range u.Models {
				u.Models[i].TokenizerDir = out.rel(u.Models[i].TokenizerDir)
			}
			p.Upstream = &u
		}
		out.Policies[n] = p
	}
	return out, nil
}

// rel resolves a relative path against the config file's folder.
func (c Config) rel(p string) string {
	if p == "" || c.Base == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.Base, p)
}

// checkServe validates what serving the config needs: the proxy section,
// and the policies against the engine and proxy sections.
func (c Config) checkServe() (*PolicySet, error) {
	if err := c.Proxy.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if c.Policies == nil {
		return nil, nil
	}
	set, err := CheckPolicies(c.Policies, c.Engine, c.Proxy.Agents, nil, false)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return set, nil
}

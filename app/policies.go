package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/dashboard"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/model"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/trainer"
	"github.com/aglrl/agl/trainer/embedded"
	"github.com/aglrl/agl/trainer/tinker"
)

// Policy kinds of the `policies:` section.
const (
	PolicyTrained  = "trained"  // an embedded model that `agl train` trains
	PolicyFrozen   = "frozen"   // an embedded model served, never trained
	PolicyUpstream = "upstream" // an OpenAI-compatible server, never trained
	PolicyTinker   = "tinker"   // a LoRA trained on a Tinker-compatible service
)

// PolicyConfig is one entry of the top-level `policies:` section (name →
// policy): which agents' calls it answers, and with what.
type PolicyConfig struct {
	Kind string `yaml:"kind"`
	// Agents whose calls this policy answers ("" the default agent: a call
	// that names none).
	Agents []string `yaml:"agents"`
	// ModelDir is the embedded model (trained, frozen).
	ModelDir string `yaml:"model_dir"`
	// Upstream is the server of an upstream policy.
	Upstream *upstream.Config `yaml:"upstream"`
	// Tinker is the service and base model of a tinker policy (whose
	// model_dir holds the base model's tokenizer and chat template).
	Tinker *tinker.Config `yaml:"tinker"`
}

// PolicySet is the parsed `policies:` section, names in sorted order.
type PolicySet struct {
	names  []string
	byName map[string]PolicyConfig
	// agentOf maps an agent to its policy's name.
	agentOf map[string]string
}

// CheckPolicies validates the `policies:` section against the rest of the
// config (engine, proxy.agents, trainer.train_agents), so that `agl train`,
// `agl gateway` and `agl export` refuse a bad one before anything runs.
// With needTrained (agl train) one policy must be of kind trained.
func CheckPolicies(ps map[string]PolicyConfig, ec EngineConfig, proxyAgents map[string]string, trainAgents []string, needTrained bool) (*PolicySet, error) {
	set := &PolicySet{byName: ps, agentOf: map[string]string{}}
	for name := range ps {
		set.names = append(set.names, name)
	}
	sort.Strings(set.names)
	if ec.ModelDir != "" || ec.Upstream != nil {
		return nil, fmt.Errorf("engine.model_dir / engine.upstream: with policies, each policy names its model_dir or upstream")
	}
	if len(trainAgents) > 0 {
		return nil, fmt.Errorf("trainer.train_agents: with policies, the policies' kinds say which agents train")
	}
	trained := 0
	for _, name := range set.names {
		p := ps[name]
		if err := api.ValidAgentName(name); err != nil {
			return nil, fmt.Errorf("policies: policy name: %w", err)
		}
		switch p.Kind {
		case PolicyTrained, PolicyFrozen:
			if p.ModelDir == "" || p.Upstream != nil {
				return nil, fmt.Errorf("policies.%s: a %s policy needs model_dir (and no upstream)", name, p.Kind)
			}
			if p.Kind == PolicyTrained {
				trained++
			}
		case PolicyUpstream:
			if p.Upstream == nil || p.ModelDir != "" {
				return nil, fmt.Errorf("policies.%s: an upstream policy needs upstream (and no model_dir)", name)
			}
		case PolicyTinker:
			if p.Tinker == nil || p.ModelDir == "" || p.Upstream != nil {
				return nil, fmt.Errorf("policies.%s: a tinker policy needs tinker and model_dir (the tokenizer and chat template; no upstream)", name)
			}
			trained++
		default:
			return nil, fmt.Errorf("policies.%s: kind %q: want %s, %s, %s or %s", name, p.Kind, PolicyTrained, PolicyFrozen, PolicyUpstream, PolicyTinker)
		}
		if len(p.Agents) == 0 {
			return nil, fmt.Errorf("policies.%s: no agents (\"\" is the default agent)", name)
		}
		for _, a := range p.Agents {
			if a != "" {
				if err := api.ValidAgentName(a); err != nil {
					return nil, fmt.Errorf("policies.%s.agents: %w", name, err)
				}
			}
			if o, ok := set.agentOf[a]; ok {
				return nil, fmt.Errorf("policies: agent %q is in both %s and %s", a, o, name)
			}
			set.agentOf[a] = name
		}
	}
	if trained == 0 && needTrained {
		return nil, fmt.Errorf("policies: no policy of kind %s: nothing to train", PolicyTrained)
	}
	models := make([]string, 0, len(proxyAgents))
	for m := range proxyAgents {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		if _, ok := set.agentOf[proxyAgents[m]]; !ok {
			return nil, fmt.Errorf("proxy.agents[%q]: agent %s is mapped to no policy", m, strconv.Quote(proxyAgents[m]))
		}
	}
	return set, nil
}

// Names lists the policies' names (sorted).
func (s *PolicySet) Names() []string { return slices.Clone(s.names) }

// Agents lists the agents of policy name (sorted).
func (s *PolicySet) Agents(name string) []string {
	a := slices.Clone(s.byName[name].Agents)
	slices.Sort(a)
	return a
}

// Trained lists the names of the trained policies (sorted).
func (s *PolicySet) Trained() []string {
	var out []string
	for _, n := range s.names {
		if k := s.byName[n].Kind; k == PolicyTrained || k == PolicyTinker {
			out = append(out, n)
		}
	}
	return out
}

// served is what `agl train` serves and trains: the trained policies, the
// proxy's backend (an AgentRouter when there are policies), the chat
// format of the dashboard's token view, and what to close.
type served struct {
	pols    []trainer.TrainedPolicy
	backend proxy.Backend
	format  chat.Format
	engines []*model.Engine
	// tokenizers decode each embedded policy's calls in the dashboard's
	// token view (by policy name: its events' model).
	tokenizers map[string]dashboard.Decoder
	// pubs get the proxy once it exists (they pause and drain it).
	pubs []*embeddedPublisher
	// weights are the served-only embedded policies' weights (agl gateway).
	weights []servedWeights
	// tinkers are the tinker policies (their sessions end on close).
	tinkers []*tinker.Policy
}

// servedWeights is where an embedded policy that is served, not trained,
// took its weights from, and the version its calls record.
type servedWeights struct {
	policy, dir string
	version     int64
}

// fileExists tells whether p is a regular file.
func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func (s *served) close() {
	if s == nil {
		return
	}
	for _, e := range s.engines {
		e.Close()
	}
	for _, p := range s.tinkers {
		p.Close()
	}
}

// trainOpts is how `agl train` opens its policies; with serveOnly (agl
// gateway) trained policies are served like frozen ones, and nothing
// trains: on the weights of ckpt (the data dir's checkpoint of an agl
// train run, at the version it reached) when it holds the policy, else on
// their model_dir's at version 1.
type trainOpts struct {
	ec        EngineConfig
	tc        trainer.Config
	resume    bool
	ckpt      string
	live      bool
	serveOnly bool
}

// trained opens one trained embedded policy named name: weights from
// modelDir, or from ckptDir when resuming; a trainer and an engine of its
// own (generation and training compile on their own backends:
// model.TrainBackend runs ops in parallel; decoding is faster without).
func (o trainOpts) trained(ctx context.Context, st store.Store, sv *served, name, modelDir, ckptDir string, version int64) (trainer.Policy, *model.Engine, error) {
	weightsDir := modelDir
	if o.resume {
		weightsDir = ckptDir
	}
	w, err := model.Load(weightsDir)
	if err != nil {
		return nil, nil, fmt.Errorf("policy %s: %w", name, err)
	}
	tm, err := model.New(w.Config, model.TrainBackend(o.ec.Backend))
	if err != nil {
		return nil, nil, err
	}
	gm, err := model.New(w.Config, o.ec.Backend)
	if err != nil {
		return nil, nil, err
	}
	opt := model.DefaultAdamW()
	if o.tc.LR > 0 {
		opt.LR = o.tc.LR
	}
	var tr *model.Trainer
	if o.resume {
		tr, err = model.LoadTrainer(tm, ckptDir, opt)
	} else {
		tr, err = model.NewTrainer(tm, w, opt)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("policy %s: %w", name, err)
	}
	var ref embedded.Reference
	if o.tc.KLCoef > 0 {
		// The reference is the policy the run started from, also when
		// resuming.
		rw := w
		if o.resume {
			if rw, err = model.Load(modelDir); err != nil {
				return nil, nil, fmt.Errorf("policy %s: reference: %w", name, err)
			}
		}
		if ref, err = embedded.NewReference(tm, rw); err != nil {
			return nil, nil, err
		}
	}
	eng, err := model.NewEngine(gm, w, version, o.ec.EngineOptions(name))
	if err != nil {
		return nil, nil, err
	}
	sv.engines = append(sv.engines, eng)
	pub := &embeddedPublisher{eng: eng, live: o.live}
	sv.pubs = append(sv.pubs, pub)
	p, err := embedded.New(modelDirCheckpoints{tr, modelDir}, pub, ref, embedded.OptionsFrom(o.tc))
	if err != nil {
		return nil, nil, err
	}
	if _, err := st.RegisterModel(ctx, store.Model{Name: name, Version: version, Weights: weightsDir}); err != nil && !errors.Is(err, store.ErrConflict) {
		return nil, nil, err
	}
	return p, eng, nil
}

// modelDirCheckpoints writes an embedded policy's checkpoints (the data
// dir's checkpoint and best) as model directories: the weights and
// optimizer state, and the tokenizer and chat files of the model_dir they
// were trained from, so that one loads, serves or teaches like model_dir.
type modelDirCheckpoints struct {
	*model.Trainer
	modelDir string
}

func (c modelDirCheckpoints) SaveCheckpoint(dir string) error {
	if err := c.Trainer.SaveCheckpoint(dir); err != nil {
		return err
	}
	return chat.CopyTokenizerFiles(c.modelDir, dir)
}

// single opens the run's one policy: the engine section's model, serving
// every agent (trainer.train_agents selects those that train).
func (o trainOpts) single(ctx context.Context, st store.Store, name string, version int64) (*served, error) {
	sv := &served{}
	f, err := chat.LoadDir(o.ec.ModelDir)
	if err != nil {
		return sv, err
	}
	p, eng, err := o.trained(ctx, st, sv, name, o.ec.ModelDir, o.ckpt, version)
	if err != nil {
		return sv, err
	}
	sv.format, sv.backend = f, proxy.NewTokenBackend(eng, f, f.Tokenizer(), 0)
	sv.pols = []trainer.TrainedPolicy{{Name: name, Policy: p}}
	return sv, nil
}

// multi opens the policies of the `policies:` section: each trained one
// with its own weights, optimizer state, engine and versions; frozen ones
// as engines that are never swapped; upstream ones as upstream backends.
// Calls reach them by agent (proxy.AgentRouter).
func (o trainOpts) multi(ctx context.Context, st store.Store, set *PolicySet, state trainer.State) (*served, error) {
	sv := &served{}
	byAgent := map[string]proxy.Backend{}
	var def string // the agent whose backend answers ModelName and count_tokens
	firstTrained := true
	for _, name := range set.names {
		pc := set.byName[name]
		var b proxy.Backend
		switch pc.Kind {
		case PolicyTrained, PolicyFrozen:
			f, err := chat.LoadDir(pc.ModelDir)
			if err != nil {
				return sv, fmt.Errorf("policy %s: %w", name, err)
			}
			var eng *model.Engine
			if pc.Kind == PolicyTrained && firstTrained {
				// The first trained policy answers count_tokens and
				// names the tokenizer of the dashboard's token view.
				def, sv.format, firstTrained = pc.Agents[0], f, false
			}
			if pc.Kind == PolicyTrained && !o.serveOnly {
				p, e, err := o.trained(ctx, st, sv, name, pc.ModelDir, filepath.Join(o.ckpt, trainer.PolicyDir(name)),
					trainer.PolicyVersion(state, name))
				if err != nil {
					return sv, err
				}
				eng = e
				sv.pols = append(sv.pols, trainer.TrainedPolicy{Name: name, Agents: set.Agents(name), Named: true, Policy: p})
			} else {
				dir, version := pc.ModelDir, int64(1)
				if d := filepath.Join(o.ckpt, trainer.PolicyDir(name)); pc.Kind == PolicyTrained && o.ckpt != "" && fileExists(filepath.Join(d, "model.safetensors")) {
					// agl gateway after agl train: the run's trained weights.
					dir, version = d, trainer.PolicyVersion(state, name)
				}
				if eng, err = model.OpenEngine(dir, o.ec.Backend, version, o.ec.EngineOptions(name)); err != nil {
					return sv, fmt.Errorf("policy %s: %w", name, err)
				}
				sv.engines = append(sv.engines, eng)
				sv.weights = append(sv.weights, servedWeights{policy: name, dir: dir, version: version})
				if _, err := st.RegisterModel(ctx, store.Model{Name: name, Version: version, Weights: dir}); err != nil && !errors.Is(err, store.ErrConflict) {
					return sv, err
				}
			}
			if sv.format == nil {
				sv.format = f
			}
			b = proxy.NewTokenBackend(eng, f, f.Tokenizer(), 0)
			if sv.tokenizers == nil {
				sv.tokenizers = map[string]dashboard.Decoder{}
			}
			sv.tokenizers[name] = f.Tokenizer()
		case PolicyTinker:
			if o.serveOnly {
				return sv, fmt.Errorf("policy %s: agl gateway does not serve a tinker policy; agl train does", name)
			}
			f, err := chat.LoadDir(pc.ModelDir)
			if err != nil {
				return sv, fmt.Errorf("policy %s: %w", name, err)
			}
			resume, version := "", trainer.PolicyVersion(state, name)
			if o.resume {
				resume = filepath.Join(o.ckpt, trainer.PolicyDir(name))
			}
			p, err := pc.Tinker.Open(ctx, name, o.tc, resume, version)
			if err != nil {
				return sv, fmt.Errorf("policy %s: %w", name, err)
			}
			sv.tinkers = append(sv.tinkers, p)
			sv.pols = append(sv.pols, trainer.TrainedPolicy{Name: name, Agents: set.Agents(name), Named: true, Policy: p})
			if _, err := st.RegisterModel(ctx, store.Model{Name: name, Version: version}); err != nil && !errors.Is(err, store.ErrConflict) {
				return sv, err
			}
			if firstTrained {
				def, sv.format, firstTrained = pc.Agents[0], f, false
			}
			b = proxy.NewTokenBackend(p.Engine(), f, f.Tokenizer(), 0)
			if sv.tokenizers == nil {
				sv.tokenizers = map[string]dashboard.Decoder{}
			}
			sv.tokenizers[name] = f.Tokenizer()
		case PolicyUpstream:
			cl, err := upstream.New(*pc.Upstream)
			if err != nil {
				return sv, fmt.Errorf("policy %s: upstream: %w", name, err)
			}
			b = proxy.NewUpstreamBackend(cl)
		}
		for _, a := range pc.Agents {
			byAgent[a] = b
		}
	}
	if _, ok := byAgent[""]; ok {
		def = ""
	}
	r, err := proxy.NewAgentRouter(byAgent, def)
	if err != nil {
		return sv, err
	}
	sv.backend = r
	return sv, nil
}

// openPolicies serves the `policies:` section (set) for `agl gateway`:
// every agent's calls go to its policy (frozen ones on their model_dir's
// weights; trained ones on the data dir's checkpoint of an agl train run
// when it holds them, at the version the run reached, unless warmStart,
// else on their model_dir's; upstream ones to their servers). Nothing
// trains here.
func openPolicies(ctx context.Context, c Config, set *PolicySet, warmStart bool, st store.Store, log *slog.Logger) (*LLM, error) {
	var err error
	ec, pc := c.Engine, c.Proxy
	o, state := trainOpts{ec: ec, serveOnly: true}, trainer.State{Version: 1}
	if ckpt := trainer.CheckpointDir(c.DataDir); !warmStart && fileExists(filepath.Join(ckpt, "state.json")) {
		if state, err = trainer.LoadState(ckpt); err != nil {
			return nil, fmt.Errorf("policies: the checkpoint of %s: %w (--warm-start serves the policies' model_dir)", c.DataDir, err)
		}
		o.ckpt = ckpt
	}
	sv, err := o.multi(ctx, st, set, state)
	if err != nil {
		sv.close()
		return nil, err
	}
	for _, n := range set.names {
		args := []any{"policy", n, "kind", set.byName[n].Kind, "agents", set.Agents(n)}
		for _, w := range sv.weights {
			if w.policy == n {
				args = append(args, "weights", w.dir, "version", w.version)
			}
		}
		log.Info("policy served", args...)
	}
	return &LLM{Proxy: proxy.New(pc, st, sv.backend), Format: sv.format, engines: sv.engines, tokenizers: sv.tokenizers}, nil
}

package app

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/model"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/trainer"
)

// embeddedPublisher swaps weights into the in-process engine behind a paused
// and drained proxy. With live set (async mode) it swaps without pausing:
// the embedded engine finishes every call on the weights it started with
// and reports that version, so harnesses keep running and the trainer does
// not wait for their calls in flight.
type embeddedPublisher struct {
	p    *proxy.Proxy
	eng  *model.Engine
	live bool
}

func (e embeddedPublisher) Publish(ctx context.Context, w *model.Weights, version int64) error {
	if e.live {
		return e.eng.Swap(w, version)
	}
	e.p.Pause()
	defer e.p.Resume()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := e.p.Drain(dctx); err != nil {
		return err
	}
	return e.eng.Swap(w, version)
}

// TrainOptions are what `agl train` adds to the config.
type TrainOptions struct {
	Options
	// Resume continues from the data dir's last checkpoint.
	Resume bool
	// Listen overrides gateway.listen ("" and no gateway.listen: a free
	// loopback port).
	Listen string
	// Stdout gets the run's report.
	Stdout io.Writer
	// Ready, when set, is called with the stack and the gateway's URL once
	// it listens, before the controller and the trainer start.
	Ready func(s *Stack, url string)
}

// trainListen is where agl train's gateway listens without --listen or
// gateway.listen.
const trainListen = "127.0.0.1:0"

// Train runs the whole RL loop of c in one process: the gateway with
// every mount, the local controller running the harness, the trainer and
// the embedded models it trains.
func Train(ctx context.Context, c Config, o TrainOptions) error {
	ec, hc, tc, pc := c.Engine, c.Controller, c.Trainer, c.Proxy
	if hc.Kind != "" && hc.Kind != controller.KindLocal {
		return fmt.Errorf("train: controller.kind %s: agl train runs the local controller; run agl controller --config %s for kind %s", hc.Kind, c.Path, hc.Kind)
	}
	// Refuse unknown names before anything runs.
	if err := tc.Validate(); err != nil {
		return fmt.Errorf("train: config %s: %w", c.Path, err)
	}
	if err := pc.Validate(); err != nil {
		return fmt.Errorf("train: config %s: %w", c.Path, err)
	}
	var pset *PolicySet
	var err error
	if c.Policies != nil {
		if pset, err = CheckPolicies(c.Policies, ec, pc.Agents, tc.TrainAgents, true); err != nil {
			return fmt.Errorf("train: config %s: %w", c.Path, err)
		}
	} else if ec.ModelDir == "" && o.Models == nil {
		return fmt.Errorf("train: config has no engine.model_dir (the model to train) and no policies")
	}
	if err := checkDistill(tc.Distill, pset); err != nil {
		return fmt.Errorf("train: config %s: %w", c.Path, err)
	}
	if len(hc.Command) == 0 {
		return fmt.Errorf("train: config has no controller.command (the harness to run)")
	}
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return err
	}
	ckpt := trainer.CheckpointDir(c.DataDir)
	_, haveCkpt := os.Stat(ckpt)
	_, haveMetrics := os.Stat(filepath.Join(c.DataDir, "metrics.jsonl"))
	if !o.Resume && (haveCkpt == nil || haveMetrics == nil) {
		return fmt.Errorf("train: %s holds a previous run: pass --resume to continue it, or --data-dir for a new one", c.DataDir)
	}
	if o.Resume && haveCkpt != nil {
		return fmt.Errorf("train: --resume but %s has no checkpoint", ckpt)
	}
	stdout := cmp.Or[io.Writer](o.Stdout, io.Discard)

	s, err := openStack(ctx, c, o.Options)
	if err != nil {
		return err
	}
	defer s.Close()
	log, st := s.log, s.Store
	if o.Resume {
		// Attempts the stopped process left running can no longer end:
		// end them now (their rollouts run again) rather than after the
		// reaper's heartbeat limit.
		n, err := trainer.EndOrphans(ctx, st)
		if err != nil {
			return err
		}
		if n > 0 {
			fmt.Fprintf(stdout, "agl train: %d attempts of the stopped run ended as interrupted; their rollouts run again\n", n)
		}
	}
	state := trainer.State{Version: 1}
	if o.Resume {
		if state, err = trainer.LoadState(ckpt); err != nil {
			return err
		}
	}
	name := cmp.Or(ec.Name, "agl")
	to := trainOpts{ec: ec, tc: tc, resume: o.Resume, ckpt: ckpt, live: tc.Mode == trainer.ModeAsync}
	var sv *served
	switch {
	case o.Models != nil:
		sv = &served{backend: o.Models.Backend, format: o.Models.Format, pols: o.Models.Policies}
	case pset == nil:
		sv, err = to.single(ctx, st, name, state.Version)
	default:
		sv, err = to.multi(ctx, st, pset, state)
	}
	s.LLM = &LLM{Format: sv.format, engines: sv.engines, tokenizers: sv.tokenizers}
	if err != nil {
		return err
	}
	if pset != nil && o.Models == nil {
		if err := to.distill(pset, sv); err != nil {
			return err
		}
	}
	for _, e := range sv.engines {
		logContext(log, e)
	}
	pc.RolloutSeeds = true
	px := proxy.New(pc, st, sv.backend)
	s.LLM.Proxy = px
	for _, p := range sv.pubs {
		p.p = px
	}

	loop, err := trainer.New(tc, st, sv.pols, state, c.DataDir, name, log, stdout)
	if err != nil {
		return err
	}

	// Gateway and controller run in process, with the configured admin key
	// or a fresh one (written to the data dir, for logging in to the
	// dashboard).
	key, keyNote := c.Gateway.AdminKey, "the admin key"
	if key == "" {
		var kb [24]byte
		rand.Read(kb[:])
		key = hex.EncodeToString(kb[:])
		keyNote = filepath.Join(c.DataDir, "admin_key")
		if err := os.WriteFile(keyNote, []byte(key+"\n"), 0o600); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", cmp.Or(o.Listen, c.Gateway.Listen, trainListen))
	if err != nil {
		return fmt.Errorf("train: gateway: listen: %w", err)
	}
	gctx, stopGateway := context.WithCancel(context.WithoutCancel(ctx))
	defer stopGateway()
	s.mount(gctx, key)
	gwDone := make(chan error, 1)
	go func() { gwDone <- s.Gateway.Serve(gctx, ln, c.Gateway.DrainTimeout, nil) }()
	url := "http://" + ln.Addr().String()
	if o.Ready != nil {
		o.Ready(s, url)
	}
	cctx, stopController := context.WithCancel(ctx)
	defer stopController()
	ctlDone := make(chan error, 1)
	go func() {
		cc := hc.Config(c.Base)
		cc.GatewayURL, cc.AdminKey, cc.Logger = url, key, log
		if cc.PollInterval == 0 {
			cc.PollInterval = 100 * time.Millisecond
		}
		ctlDone <- controller.Run(cctx, cc)
	}()
	if pset == nil {
		fmt.Fprintf(stdout, "agl train: gateway %s, model %s v%d (%s), data %s\n", url, name, state.Version, ec.ModelDir, c.DataDir)
	} else {
		fmt.Fprintf(stdout, "agl train: gateway %s, data %s, policies:\n", url, c.DataDir)
		for _, n := range pset.names {
			p := pset.byName[n]
			fmt.Fprintf(stdout, "  %s (%s) for agents %q\n", n, p.Kind, pset.Agents(n))
		}
		for _, p := range sv.pols {
			if d := p.Distill; d != nil {
				fmt.Fprintf(stdout, "  %s learns from teacher %s (distill mode %s, coef %g)\n", p.Name, d.Teacher, d.Mode, d.Coef)
			}
		}
	}
	fmt.Fprintf(stdout, "dashboard %s/ (log in with %s)\nsampling seed %d (trainer.seed)\n", url, keyNote, loop.Seed())

	sum, runErr := loop.Run(ctx)
	stopController()
	if err := <-ctlDone; err != nil && !errors.Is(err, context.Canceled) {
		log.Warn("controller", "err", err)
	}
	stopGateway()
	<-gwDone
	if runErr != nil {
		return runErr
	}
	curve := filepath.Join(c.DataDir, "curve.svg")
	if err := trainer.WriteCurve(filepath.Join(c.DataDir, "metrics.jsonl"), curve); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\ndone in %s: validation success %.1f%% → %.1f%% (reward %.3f → %.3f) over %d held-out tasks\nmetrics %s\ncurve   %s\ncheckpoint %s\n",
		sum.Elapsed.Round(time.Second), 100*sum.Before.SuccessRate, 100*sum.After.SuccessRate, sum.Before.RewardMean,
		sum.After.RewardMean, sum.After.Rollouts, filepath.Join(c.DataDir, "metrics.jsonl"), curve, ckpt)
	if b := sum.Best; b != nil {
		fmt.Fprintf(stdout, "best    %s: validation success %.1f%% (reward %.3f) at step %d (v%d)\n",
			trainer.BestDir(c.DataDir), 100*b.SuccessRate, b.RewardMean, b.Step, b.Version)
	}
	return nil
}

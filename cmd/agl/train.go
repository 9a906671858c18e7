package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/aglrl/agl/controller"
	"github.com/aglrl/agl/dashboard"
	"github.com/aglrl/agl/gateway"
	"github.com/aglrl/agl/metrics"
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

func runTrain(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	dataDir := fs.String("data-dir", "", "where the store, checkpoint, metrics and curve go (default: the config's data_dir)")
	resume := fs.Bool("resume", false, "continue from the data dir's last checkpoint")
	steps := fs.Int("steps", 0, "override trainer.steps")
	listen := fs.String("listen", "127.0.0.1:0", "address of the in-process gateway, its dashboard and /metrics")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("want one config file: agl train CONFIG")
	}
	// Flags may follow the config too (the examples' run.sh pass theirs
	// after it).
	cfgPath := fs.Arg(0)
	if err := parseFlags(fs, fs.Args()[1:]); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("want one config file: agl train CONFIG (got also %q)", fs.Args())
	}
	fl := flag.NewFlagSet("", flag.ContinueOnError)
	load := configFlags(fl)
	fl.Parse([]string{"--config", cfgPath})
	c, err := load()
	if err != nil {
		return err
	}
	if *dataDir != "" {
		c.DataDir = *dataDir
	}
	base := filepath.Dir(cfgPath)
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(base, p)
	}
	var ec engineConfig
	var hc controller.Section
	var tc trainer.Config
	var pc proxy.Config
	var pols map[string]policyConfig
	for name, v := range map[string]any{"engine": &ec, "controller": &hc, "trainer": &tc, "proxy": &pc, "policies": &pols} {
		if err := c.Section(name, v); err != nil {
			return err
		}
	}
	if hc.Kind != "" && hc.Kind != controller.KindLocal {
		return fmt.Errorf("train: controller.kind %s: agl train runs the local controller; run agl controller --config %s for kind %s", hc.Kind, cfgPath, hc.Kind)
	}
	if *steps > 0 {
		tc.Steps = *steps
	}
	// Refuse unknown names before anything runs.
	if err := tc.Validate(); err != nil {
		return fmt.Errorf("train: config %s: %w", cfgPath, err)
	}
	if err := pc.Validate(); err != nil {
		return fmt.Errorf("train: config %s: %w", cfgPath, err)
	}
	var pset *policySet
	if pols != nil {
		if pset, err = checkPolicies(pols, ec, pc.Agents, tc.TrainAgents, true); err != nil {
			return fmt.Errorf("train: config %s: %w", cfgPath, err)
		}
		for _, n := range pset.names {
			p := pols[n]
			p.ModelDir = rel(p.ModelDir)
			pols[n] = p
		}
	} else if ec.ModelDir == "" {
		return fmt.Errorf("train: config has no engine.model_dir (the model to train) and no policies")
	}
	if len(hc.Command) == 0 {
		return fmt.Errorf("train: config has no controller.command (the harness to run)")
	}
	ec.ModelDir, tc.Tasks, tc.ValTasks = rel(ec.ModelDir), rel(tc.Tasks), rel(tc.ValTasks)
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return err
	}
	ckpt := trainer.CheckpointDir(c.DataDir)
	_, haveCkpt := os.Stat(ckpt)
	_, haveMetrics := os.Stat(filepath.Join(c.DataDir, "metrics.jsonl"))
	if !*resume && (haveCkpt == nil || haveMetrics == nil) {
		return fmt.Errorf("train: %s holds a previous run: pass --resume to continue it, or --data-dir for a new one", c.DataDir)
	}
	if *resume && haveCkpt != nil {
		return fmt.Errorf("train: --resume but %s has no checkpoint", ckpt)
	}

	log := newLogger()
	st, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer st.Close()
	if *resume {
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
	met := metrics.New(metrics.Options{Store: st, CallsFromEvents: true})
	st = met.WrapStore(st)
	state := trainer.State{Version: 1}
	if *resume {
		if state, err = trainer.LoadState(ckpt); err != nil {
			return err
		}
	}
	name := ec.Name
	if name == "" {
		name = "agl"
	}
	o := trainOpts{ec: ec, tc: tc, resume: *resume, ckpt: ckpt, live: tc.Mode == trainer.ModeAsync}
	var sv *served
	if pset == nil {
		sv, err = o.single(ctx, st, name, state.Version)
	} else {
		sv, err = o.multi(ctx, st, pset, state)
	}
	defer sv.close()
	if err != nil {
		return err
	}
	for _, e := range sv.engines {
		logContext(log, e)
	}
	pc.MaxAbsReward = c.Gateway.MaxAbsReward
	pc.StoredCallBytes, pc.StoredAttemptBytes = c.Gateway.MaxStoredCallBytes, c.Gateway.MaxStoredAttemptBytes
	pc.RolloutSeeds = true
	px := proxy.New(pc, st, sv.backend)
	for _, p := range sv.pubs {
		p.p = px
	}
	format := sv.format

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
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	gctx, stopGateway := context.WithCancel(context.WithoutCancel(ctx))
	defer stopGateway()
	srv := gateway.New(gateway.Options{Store: st, AdminKey: key, LLM: px, MaxAbsReward: c.Gateway.MaxAbsReward, Logger: log, Version: version(), Wrap: met.Middleware,
		MaxBodyBytes: c.Gateway.MaxBodyBytes, Limits: gatewayLimits(c.Gateway)})
	srv.Handle("GET /metrics", met.Handler())
	dashboard.New(dashboard.Options{Store: st, AdminKey: key, Status: srv.Status, Tokenizer: format.Tokenizer(), Tokenizers: sv.tokenizers, Logger: log}).Register(srv.Handle)
	gwDone := make(chan error, 1)
	go func() { gwDone <- srv.Serve(gctx, ln, 10*time.Second, nil) }()
	url := "http://" + ln.Addr().String()
	cctx, stopController := context.WithCancel(ctx)
	defer stopController()
	ctlDone := make(chan error, 1)
	go func() {
		cc := hc.Config(base)
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
			fmt.Fprintf(stdout, "  %s (%s) for agents %q\n", n, p.Kind, pset.agents(n))
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

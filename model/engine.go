package model

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aglrl/agl/engine"
)

// EngineOptions configure an Engine.
type EngineOptions struct {
	// Name is the served model's name.
	Name string
	// MaxBatch is the number of sequences decoded together (default 16).
	MaxBatch int
	// MaxContext bounds prompt+response length; the KV cache grows to it
	// (default: the config's max_position_embeddings, lowered to what the
	// KV cache memory budget holds; see NewEngine).
	MaxContext int
	// KVCacheBudget bounds the KV cache's bytes (MaxBatch sequences of
	// MaxContext tokens); default: half the memory available at start
	// (MemAvailable in /proc/meminfo), no bound where that is unknown.
	KVCacheBudget int64
	// InitialCache is the first KV-cache length; it doubles as needed
	// (default 64).
	InitialCache int
}

// Engine generates with the embedded model. It implements
// engine.TokenEngine.
//
// Concurrent Generate calls are batched continuously: a scheduler goroutine
// admits waiting requests into free slots of the running batch (prefilling
// them together), then decodes one token for every active slot per step. Swap installs new weights without dropping requests in flight: they
// finish on the weights they started with and report that version, while new
// requests use the new weights (each version has its own batch and cache).
//
// Log-probs are log-softmax of the model's logits at temperature 1, whatever
// the sampling temperature, top-k or top-p: the quantity the trainer
// recomputes with Model.LogProbs.
type Engine struct {
	m       *Model
	opts    EngineOptions
	ctxInfo ContextInfo

	mu      sync.Mutex
	cur     *servedVersion
	queue   []*request
	closed  bool
	wake    chan struct{}
	done    chan struct{}
	seedRNG *rand.Rand
	running atomic.Int64 // sequences being decoded
	steps   atomic.Int64 // decode steps taken
	tokens  atomic.Int64 // tokens generated
}

// EngineStats are counters for monitoring.
type EngineStats struct {
	Running int   // sequences being decoded now
	Queued  int   // requests waiting for a slot
	Steps   int64 // batched decode steps so far
	Tokens  int64 // tokens generated so far
}

// Stats reports the engine's counters.
func (e *Engine) Stats() EngineStats {
	e.mu.Lock()
	q := len(e.queue)
	e.mu.Unlock()
	return EngineStats{Running: int(e.running.Load()), Queued: q, Steps: e.steps.Load(), Tokens: e.tokens.Load()}
}

var _ engine.TokenEngine = (*Engine)(nil)

type servedVersion struct {
	w       *DeviceWeights
	version int64
}

type request struct {
	ctx    context.Context
	prompt []int32
	s      engine.Sampling
	seed   uint64
	reply  chan reply
	cancel atomic.Bool
}

type reply struct {
	res engine.Result
	err error
}

// slot is one sequence of a running batch.
type slot struct {
	req     *request
	sp      *sampler
	ids     []int32
	logp    []float32
	lastTok int32
	pos     int32 // position of lastTok
}

// batch is the running set of sequences on one weights version.
type batch struct {
	ver   *servedVersion
	cache *kvCache
	slots []*slot
}

// ContextInfo says how an engine's context length was chosen, for the
// start-up log.
type ContextInfo struct {
	MaxContext   int    // tokens, prompt + response
	KVCacheBytes int64  // the KV cache at MaxContext for MaxBatch sequences
	Source       string // "engine.max_context", "max_position_embeddings" or "memory"
	Note         string // why the default was lowered, if it was
}

// KVCacheBytes is the size of the KV cache holding slots sequences of
// maxContext tokens (float32 keys and values of every layer).
func (c Config) KVCacheBytes(slots, maxContext int) int64 {
	return 2 * 4 * int64(c.NumHiddenLayers) * int64(slots) * int64(c.NumKeyValueHeads) * int64(bucket(maxContext)) * int64(c.HeadDim)
}

// NewEngine serves w as version and starts the scheduler; Close stops it.
//
// The context length is opts.MaxContext, or else the config's
// max_position_embeddings. It may not exceed Config.MaxExactLength (a
// sliding window or dynamic RoPE agl would not reproduce beyond it), nor
// may its KV cache exceed the budget: an explicit MaxContext over it is an
// error, the default is lowered to fit (ContextInfo says so).
func NewEngine(m *Model, w *Weights, version int64, opts EngineOptions) (*Engine, error) {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 16
	}
	if opts.InitialCache <= 0 {
		opts.InitialCache = 64
	}
	if opts.Name == "" {
		opts.Name = "agl-embedded"
	}
	info, err := chooseContext(m.cfg, opts)
	if err != nil {
		return nil, err
	}
	opts.MaxContext = info.MaxContext
	if _, err := m.gen(); err != nil {
		return nil, err
	}
	d, err := m.Upload(w)
	if err != nil {
		return nil, err
	}
	e := &Engine{m: m, opts: opts, ctxInfo: info, cur: &servedVersion{w: d, version: version},
		wake: make(chan struct{}, 1), done: make(chan struct{}), seedRNG: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	go e.loop()
	return e, nil
}

// chooseContext resolves EngineOptions.MaxContext (see NewEngine).
func chooseContext(cfg Config, opts EngineOptions) (ContextInfo, error) {
	budget := opts.KVCacheBudget
	if budget <= 0 {
		budget = memAvailable() / 2
	}
	exact := cfg.MaxExactLength()
	if opts.MaxContext > 0 {
		if opts.MaxContext < 2 {
			return ContextInfo{}, fmt.Errorf("model: max_context %d too small", opts.MaxContext)
		}
		if exact > 0 && opts.MaxContext > exact {
			return ContextInfo{}, fmt.Errorf("model: max_context %d exceeds %d, the longest sequence agl computes exactly for this config (sliding_window or dynamic rope_scaling)", opts.MaxContext, exact)
		}
		kv := cfg.KVCacheBytes(opts.MaxBatch, opts.MaxContext)
		if budget > 0 && kv > budget {
			return ContextInfo{}, fmt.Errorf("model: max_context %d needs a %s KV cache for max_batch %d, over the %s budget (half the available memory): lower max_context or max_batch",
				opts.MaxContext, fmtBytes(kv), opts.MaxBatch, fmtBytes(budget))
		}
		return ContextInfo{MaxContext: opts.MaxContext, KVCacheBytes: kv, Source: "engine.max_context"}, nil
	}
	info := ContextInfo{MaxContext: cfg.MaxPositionEmbeddings, Source: "max_position_embeddings"}
	if exact > 0 && info.MaxContext > exact {
		info.MaxContext = exact
		info.Note = fmt.Sprintf("lowered from max_position_embeddings %d to %d, the longest sequence agl computes exactly for this config", cfg.MaxPositionEmbeddings, exact)
	}
	if budget > 0 && cfg.KVCacheBytes(opts.MaxBatch, info.MaxContext) > budget {
		per := cfg.KVCacheBytes(opts.MaxBatch, 1) // bytes per position
		fit := int(budget/per) / 512 * 512
		if fit < 512 {
			return ContextInfo{}, fmt.Errorf("model: a KV cache of 512 tokens for max_batch %d needs %s, over the %s budget (half the available memory): lower max_batch",
				opts.MaxBatch, fmtBytes(cfg.KVCacheBytes(opts.MaxBatch, 512)), fmtBytes(budget))
		}
		info.Note = fmt.Sprintf("lowered from %d to %d: a KV cache of %d tokens for max_batch %d would need %s, over the %s budget (half the available memory); set engine.max_context or lower engine.max_batch",
			info.MaxContext, fit, info.MaxContext, opts.MaxBatch, fmtBytes(cfg.KVCacheBytes(opts.MaxBatch, info.MaxContext)), fmtBytes(budget))
		info.MaxContext, info.Source = fit, "memory"
	}
	info.KVCacheBytes = cfg.KVCacheBytes(opts.MaxBatch, info.MaxContext)
	return info, nil
}

// memAvailable is the host's available memory in bytes (0 if unknown).
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// Context reports the context length and how it was chosen.
func (e *Engine) Context() ContextInfo { return e.ctxInfo }

// ModelName implements engine.TokenEngine.
func (e *Engine) ModelName() string { return e.opts.Name }

// Version implements engine.TokenEngine: the version new requests get.
func (e *Engine) Version() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur.version
}

// MaxContext implements engine.TokenEngine.
func (e *Engine) MaxContext() int { return e.opts.MaxContext }

// Swap serves new weights as version for requests admitted from now on.
func (e *Engine) Swap(w *Weights, version int64) error {
	d, err := e.m.Upload(w)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.cur = &servedVersion{w: d, version: version}
	e.mu.Unlock()
	e.signal()
	return nil
}

// Close stops the scheduler; waiting and running requests fail.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	e.signal()
	<-e.done
	return nil
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// ErrClosed is returned by Generate after Close.
var ErrClosed = errors.New("model: engine closed")

// Generate implements engine.TokenEngine. Sampling.Seed 0 draws a fresh
// random seed; any other seed makes the result a function of prompt,
// sampling parameters, seed and weights only.
func (e *Engine) Generate(ctx context.Context, prompt []int32, s engine.Sampling) (engine.Result, error) {
	if len(prompt) == 0 {
		return engine.Result{}, fmt.Errorf("model: %w: empty prompt", engine.ErrInvalidPrompt)
	}
	if len(prompt) >= e.opts.MaxContext {
		return engine.Result{}, fmt.Errorf("model: %w: prompt of %d tokens leaves no room in a context of %d", engine.ErrInvalidPrompt, len(prompt), e.opts.MaxContext)
	}
	for _, id := range prompt {
		if id < 0 || int(id) >= e.m.cfg.VocabSize {
			return engine.Result{}, fmt.Errorf("model: %w: token id %d outside vocabulary of %d", engine.ErrInvalidPrompt, id, e.m.cfg.VocabSize)
		}
	}
	r := &request{ctx: ctx, prompt: slices.Clone(prompt), s: s, reply: make(chan reply, 1)}
	r.s.StopIDs = slices.Clone(s.StopIDs)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return engine.Result{}, ErrClosed
	}
	r.seed = s.Seed
	if r.seed == 0 {
		r.seed = e.seedRNG.Uint64()
	}
	e.queue = append(e.queue, r)
	e.mu.Unlock()
	e.signal()
	select {
	case rep := <-r.reply:
		return rep.res, rep.err
	case <-ctx.Done():
		r.cancel.Store(true)
		e.signal()
		return engine.Result{}, ctx.Err()
	}
}

// loop is the scheduler.
func (e *Engine) loop() {
	defer close(e.done)
	var batches []*batch // the last one is on the current version
	fail := func(err error) {
		for _, b := range batches {
			for _, s := range b.slots {
				if s != nil {
					s.req.reply <- reply{err: err}
				}
			}
			b.cache.free()
		}
		batches = nil
	}
	for {
		e.mu.Lock()
		closed, cur := e.closed, e.cur
		var pending []*request
		pending, e.queue = e.queue, nil
		e.mu.Unlock()
		if closed {
			for _, r := range pending {
				r.reply <- reply{err: ErrClosed}
			}
			fail(ErrClosed)
			return
		}
		// Admit waiting requests into the current version's batch.
		var b *batch
		if n := len(batches); n > 0 && batches[n-1].ver == cur {
			b = batches[n-1]
		}
		var requeue []*request
		var admitRows []int
		var admitReqs []*request
		for _, r := range pending {
			if r.cancel.Load() || r.ctx.Err() != nil {
				continue
			}
			if b == nil {
				b = &batch{ver: cur, cache: e.m.newCache(e.opts.MaxBatch, e.opts.InitialCache, bucket(e.opts.MaxContext)), slots: make([]*slot, e.opts.MaxBatch)}
				batches = append(batches, b)
			}
			free := -1
			for i, s := range b.slots {
				if s == nil && !slices.Contains(admitRows, i) {
					free = i
					break
				}
			}
			if free < 0 {
				requeue = append(requeue, r)
				continue
			}
			admitRows = append(admitRows, free)
			admitReqs = append(admitReqs, r)
		}
		if len(admitReqs) > 0 {
			if err := e.admit(b, admitRows, admitReqs); err != nil {
				for _, r := range admitReqs {
					r.reply <- reply{err: err}
				}
			}
		}
		if len(requeue) > 0 {
			e.mu.Lock()
			e.queue = append(requeue, e.queue...)
			e.mu.Unlock()
		}
		// One decode step for every batch with active slots.
		active := false
		kept := batches[:0]
		for _, bb := range batches {
			if err := e.step(bb); err != nil {
				fail(fmt.Errorf("model: generation: %w", err))
				kept = nil
				break
			}
			if slices.ContainsFunc(bb.slots, func(s *slot) bool { return s != nil }) {
				active = true
				kept = append(kept, bb)
			} else if bb.ver != cur {
				bb.cache.free() // an old version with nothing left
			} else {
				kept = append(kept, bb)
			}
		}
		batches = kept
		e.running.Store(int64(countActive(batches)))
		if !active && len(requeue) == 0 {
			// Idle: free caches and wait.
			for _, bb := range batches {
				bb.cache.free()
			}
			batches = nil
			<-e.wake
		}
	}
}

// admit prefills requests into the given free slots of b (one batched
// prefill) and samples their first tokens.
func (e *Engine) admit(b *batch, rows []int, reqs []*request) error {
	prompts := make([][]int32, len(reqs))
	for i, r := range reqs {
		prompts[i] = r.prompt
	}
	logits, err := e.m.prefill(b.ver.w, b.cache, rows, prompts)
	if err != nil {
		return err
	}
	for i, r := range reqs {
		b.slots[rows[i]] = &slot{req: r, sp: newSampler(r.s, r.seed), pos: int32(len(r.prompt))}
		e.accept(b, rows[i], logits[i])
	}
	return nil
}

// accept samples the next token of slot i from logits and finishes the
// slot when done.
func (e *Engine) accept(b *batch, i int, logits []float32) {
	s := b.slots[i]
	tok := s.sp.sample(logits)
	s.ids = append(s.ids, tok)
	s.logp = append(s.logp, logSoftmaxAt(logits, tok))
	s.lastTok = tok
	e.tokens.Add(1)
	finish := ""
	switch {
	case slices.Contains(s.req.s.StopIDs, tok):
		finish = engine.FinishStop
	case s.req.s.MaxTokens > 0 && len(s.ids) >= s.req.s.MaxTokens,
		len(s.req.prompt)+len(s.ids) >= e.opts.MaxContext:
		finish = engine.FinishLength
	}
	if finish == "" {
		return
	}
	s.req.reply <- reply{res: engine.Result{IDs: s.ids, Logprobs: s.logp, FinishReason: finish,
		Model: e.opts.Name, ModelVersion: b.ver.version}}
	b.slots[i] = nil
}

// step decodes one token for each active slot of b.
func (e *Engine) step(b *batch) error {
	n := len(b.slots)
	tokens, pos := make([]int32, n), make([]int32, n)
	for i := range pos {
		pos[i] = -1 // idle
	}
	busy := false
	for i, s := range b.slots {
		if s == nil {
			continue
		}
		if s.req.cancel.Load() || s.req.ctx.Err() != nil {
			b.slots[i] = nil // the next prefill of this slot rewrites its row
			continue
		}
		tokens[i], pos[i] = s.lastTok, s.pos
		busy = true
	}
	if !busy {
		return nil
	}
	e.running.Store(int64(countActive([]*batch{b})))
	e.steps.Add(1)
	logits, err := e.m.decode(b.ver.w, b.cache, tokens, pos)
	if err != nil {
		return err
	}
	v := e.m.cfg.VocabSize
	for i, s := range b.slots {
		if s == nil {
			continue
		}
		s.pos++
		e.accept(b, i, logits[i*v:(i+1)*v])
	}
	return nil
}

func countActive(bs []*batch) int {
	n := 0
	for _, b := range bs {
		for _, s := range b.slots {
			if s != nil {
				n++
			}
		}
	}
	return n
}

// OpenEngine loads a model directory (config.json and safetensors) and
// serves it as version on the given backend ("" for the default).
func OpenEngine(dir, backend string, version int64, opts EngineOptions) (*Engine, error) {
	w, err := Load(dir)
	if err != nil {
		return nil, err
	}
	m, err := New(w.Config, backend)
	if err != nil {
		return nil, err
	}
	return NewEngine(m, w, version, opts)
}

// Model returns the compiled model the engine runs (it can be shared with
// a Trainer of the same configuration).
func (e *Engine) Model() *Model { return e.m }

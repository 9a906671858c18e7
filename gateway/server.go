// Package gateway is agl's HTTP server: the rollout store API under /api/,
// the LLM routes under /r/ (served by package proxy), and whatever else is
// mounted on it (dashboard, metrics, trace intake). It also runs the reaper.
package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// LLM is the proxy that serves /r/{rollout}/{attempt}/… and can be paused
// for weight swaps.
type LLM interface {
	http.Handler
	Pause()
	Resume()
	// Drain waits until no call is in flight.
	Drain(ctx context.Context) error
	Status() (paused bool, inflight int)
}

// Options configure a Server.
type Options struct {
	Store store.Store
	// AdminKey guards the API; empty means no auth, loopback only.
	AdminKey string
	// MaxBodyBytes bounds request bodies (default 32 MiB).
	MaxBodyBytes int64
	// ReapInterval is how often the reaper runs (default 2s; <0 disables).
	ReapInterval time.Duration
	// MaxAbsReward bounds |reward| of appended reward events (default
	// api.DefaultMaxAbsReward).
	MaxAbsReward float64
	// LLM serves /r/…; nil answers those routes with 404.
	LLM    LLM
	Logger *slog.Logger
	// Version is reported by /api/health and /api/gateway.
	Version string
	// Wrap, if set, wraps the whole handler when serving (e.g. metrics.Middleware).
	Wrap func(http.Handler) http.Handler
	// Limits bound slow, idle and numerous clients (zero: DefaultLimits).
	Limits Limits
	// ModelsChanged, if set, is called after a model registration was
	// stored (POST /api/models) and before it is answered, e.g. to update
	// the upstream routing table (proxy.ModelSync.Changed), so that calls
	// after the answer are routed by it.
	ModelsChanged func(ctx context.Context)
	// Shared, if set, is the store's cross-replica side (the PostgreSQL
	// store; before any wrapping of Store): long-polls wake on changes any
	// replica commits, and pause / resume reach every replica.
	Shared store.Shared
	// WaitPoll is how often a long-poll re-reads the store when nothing
	// woke it (default 250ms, or 2s with Shared: a safety net for a missed
	// notification), and how often the shared pause state is re-read.
	WaitPoll time.Duration
}

// Server is the gateway.
type Server struct {
	opt      Options
	log      *slog.Logger
	mux      *http.ServeMux
	adminSum [32]byte
	closing  atomic.Bool
	changes  notifier
	// replica names this process in the store's replica reports
	// (Options.Shared).
	replica string
	// reportNow makes report report at once (the pause state changed).
	reportNow chan struct{}
}

// New builds a Server. Mount more handlers with Handle before serving.
func New(opt Options) *Server {
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = 32 << 20
	}
	if opt.ReapInterval == 0 {
		opt.ReapInterval = 2 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	opt.Limits = opt.Limits.withDefaults()
	if opt.WaitPoll <= 0 {
		opt.WaitPoll = 250 * time.Millisecond
		if opt.Shared != nil {
			opt.WaitPoll = 2 * time.Second
		}
	}
	s := &Server{opt: opt, log: opt.Logger, mux: http.NewServeMux(), replica: replicaID(), reportNow: make(chan struct{}, 1)}
	if opt.AdminKey != "" {
		s.adminSum = sha256.Sum256([]byte(opt.AdminKey))
	}
	s.routes()
	return s
}

// Handle mounts an extra handler (dashboard, metrics, …) on the server.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Notify wakes long-polls waiting for terminal rollouts; call it after
// changing the store outside the API.
func (s *Server) Notify() { s.changes.broadcast() }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.protect(w, r, s.serve)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if s.closing.Load() {
		w.Header().Set("Connection", "close")
		api.WriteError(w, s.log, api.Errorf(http.StatusServiceUnavailable, "shutting_down", "gateway is shutting down"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.opt.MaxBodyBytes)
	s.mux.ServeHTTP(w, r)
}

// IsAdmin reports whether the request carries the admin key (or none is
// set), compared in constant time.
func (s *Server) IsAdmin(r *http.Request) bool {
	if s.opt.AdminKey == "" {
		return true
	}
	k := RequestKey(r)
	if k == "" {
		return false
	}
	sum := sha256.Sum256([]byte(k))
	return subtle.ConstantTimeCompare(sum[:], s.adminSum[:]) == 1
}

// RequestKey returns the key a request presents (api.RequestKey), or ""
// when it presents none or two different ones.
func RequestKey(r *http.Request) string {
	k, err := api.RequestKey(r)
	if err != nil {
		return ""
	}
	return k
}

// IsLoopback reports whether a listen address binds only to loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ListenAndServe serves on addr until ctx ends, then shuts down gracefully,
// draining in-flight requests for up to drainTimeout. ready, if not nil,
// receives the bound address once listening.
func (s *Server) ListenAndServe(ctx context.Context, addr string, drainTimeout time.Duration, ready func(net.Addr)) error {
	if s.opt.AdminKey == "" && !IsLoopback(addr) {
		return fmt.Errorf("refusing to listen on %s without an admin key: set gateway.admin_key or AGL_ADMIN_KEY, or listen on 127.0.0.1", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("gateway: listen: %w", err)
	}
	return s.Serve(ctx, ln, drainTimeout, ready)
}

// Serve is ListenAndServe on an existing listener.
func (s *Server) Serve(ctx context.Context, ln net.Listener, drainTimeout time.Duration, ready func(net.Addr)) error {
	var h http.Handler = s
	if s.opt.Wrap != nil {
		h = s.opt.Wrap(s)
	}
	lim := s.opt.Limits
	// No server-wide ReadTimeout or WriteTimeout: they would bound a whole
	// call, cutting long streaming answers; each request gets a body read
	// deadline and a rolling write deadline instead (protect).
	hs := &http.Server{Handler: h, ReadHeaderTimeout: lim.ReadHeaderTimeout, IdleTimeout: lim.IdleTimeout,
		MaxHeaderBytes: lim.MaxHeaderBytes, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	ln = newLimitListener(ln, lim)
	var wg sync.WaitGroup
	rctx, stopReaper := context.WithCancel(ctx)
	defer stopReaper()
	if s.opt.ReapInterval > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); s.reapLoop(rctx) }()
	}
	if s.opt.Shared != nil && s.opt.LLM != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.watchPause(rctx) }()
		wg.Add(1)
		go func() { defer wg.Done(); s.report(rctx) }()
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	if ready != nil {
		ready(ln.Addr())
	}
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		s.closing.Store(true)
		s.changes.broadcast()
		sctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		err = hs.Shutdown(sctx)
		cancel()
		if err == nil {
			err = <-errc
		}
	}
	stopReaper()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (s *Server) reapLoop(ctx context.Context) {
	t := time.NewTicker(s.opt.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := s.opt.Store.Reap(ctx, time.Now())
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("reaper failed", "err", err)
			}
			continue
		}
		if res != (store.ReapResult{}) {
			s.log.Info("reaper", "unresponsive", res.Unresponsive, "timed_out", res.TimedOut, "requeued", res.Requeued, "failed", res.Failed)
			s.changes.broadcast()
		}
	}
}

// changed returns a channel closed at the next change: one this process
// made, or (with Options.Shared) one any replica committed.
func (s *Server) changed() (local, shared <-chan struct{}) {
	local = s.changes.wait()
	if s.opt.Shared != nil {
		shared = s.opt.Shared.Changed()
	}
	return local, shared
}

// PauseSetting is the store.Shared setting holding the LLM routes' pause
// state ({"paused":bool}) that every replica applies.
const PauseSetting = "gateway.pause"

type pauseValue struct {
	Paused bool `json:"paused"`
}

// watchPause applies the shared pause state to this replica's LLM routes.
func (s *Server) watchPause(ctx context.Context) {
	store.WatchSetting(ctx, s.opt.Shared, PauseSetting, min(s.opt.WaitPoll, time.Second), func(v json.RawMessage) {
		var p pauseValue
		if err := json.Unmarshal(v, &p); err != nil {
			s.log.Warn("shared pause state unreadable", "setting", PauseSetting, "err", err)
			return
		}
		if p.Paused {
			s.opt.LLM.Pause()
		} else {
			s.opt.LLM.Resume()
		}
		s.log.Info("pause state applied", "paused", p.Paused)
		select {
		case s.reportNow <- struct{}{}:
		default:
		}
	})
}

// replicaID returns "host-xxxxxx": the host name and 6 random hex digits.
func replicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "gateway"
	}
	var b [3]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%x", host, b)
}

// Replica report intervals: how often a replica reports its state, and
// how often while paused (a drain through another replica waits for the
// reports).
const (
	reportEvery       = time.Second
	reportEveryPaused = 100 * time.Millisecond
	// replicaStale: a replica that did not report for this long is gone
	// (crashed); drains stop waiting for it.
	replicaStale = 5 * time.Second
)

// report keeps this replica's report in the store current until ctx
// ends, then removes it.
func (s *Server) report(ctx context.Context) {
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		s.opt.Shared.DeleteReplica(dctx, s.replica)
	}()
	for {
		paused, inflight := s.opt.LLM.Status()
		if err := s.opt.Shared.PutReplica(ctx, store.Replica{ID: s.replica, Paused: paused, InFlight: inflight}); err != nil && ctx.Err() == nil {
			s.log.Warn("replica report failed", "err", err)
		}
		every := reportEvery
		if paused {
			every = reportEveryPaused
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-s.reportNow:
			t.Stop()
		}
	}
}

// drainReplicas waits until every other live replica reported, after
// the call, that no call is in flight: its second report since (the
// first may have been read before the call and written after).
func (s *Server) drainReplicas(ctx context.Context) error {
	first, err := s.opt.Shared.Replicas(ctx, replicaStale)
	if err != nil {
		return err
	}
	before := map[string]int64{}
	for _, r := range first {
		before[r.ID] = r.Reports
	}
	// busy is the replica last seen with calls in flight (or not yet
	// reporting): a deadline that ends the wait names it, also when it
	// cuts a query short.
	var busy *store.Replica
	busyErr := func() error {
		if busy.Reports < before[busy.ID]+2 {
			return fmt.Errorf("replica %s has not reported since the drain began (before: %d calls in flight, paused: %v): %w", busy.ID, busy.InFlight, busy.Paused, ctx.Err())
		}
		return fmt.Errorf("replica %s: %d calls in flight (paused: %v): %w", busy.ID, busy.InFlight, busy.Paused, ctx.Err())
	}
	for {
		rs, err := s.opt.Shared.Replicas(ctx, replicaStale)
		if err != nil {
			if busy != nil && ctx.Err() != nil {
				return busyErr()
			}
			return err
		}
		busy = nil
		for i, r := range rs {
			if r.ID != s.replica && (r.Reports < before[r.ID]+2 || r.InFlight > 0) {
				busy = &rs[i]
				break
			}
		}
		if busy == nil {
			return nil
		}
		t := time.NewTimer(reportEveryPaused)
		select {
		case <-ctx.Done():
			t.Stop()
			return busyErr()
		case <-t.C:
		}
	}
}

// notifier wakes every waiter when something changed.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) broadcast() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

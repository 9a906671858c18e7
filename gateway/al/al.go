// Package al serves Agent Lightning v1.0's gateway API on agl's store, so
// that AL's trainer (its verl RayPPOTrainer subclass and rollout manager)
// drives agl unchanged: the gateway mounts it under a path prefix (default
// /al) and AL's clients, httpx clients with base_url http://GW/al, append
// their paths to it.
//
// Routes, relative to the prefix, as AL's FastAPI app answers them
// (agentlightning/server/app.py and routes/*.py at v1.0.0):
//
//	GET    /healthz                                   {"status":"ok"}, no auth
//	GET    /openapi.json                              AL's info and operations, no auth
//	POST   /api/models    [Model…]                    201, upsert by (model, endpoint)
//	DELETE /api/models                                {"status":"ok"}
//	POST   /api/rollouts  [RolloutCreate…]            201, idempotent on rollout_id
//	GET    /api/rollouts?state_in=…&limit=            [Rollout…]
//	GET    /api/rollouts/terminal?after=&limit=       {"items","next_after","total_terminal"}
//	GET    /api/rollouts/{id}                         {"rollout": Rollout, "attempts": […]}
//	PATCH  /api/rollouts/{id}  {"status":{…}}         Rollout (running: an external controller starts it)
//	DELETE /api/rollouts/{id}                         204, also when unknown
//	POST   /api/rollouts/{id}/attempt/{aid}/events    Event
//	GET    /api/rollouts/{id}/events?event_type=&format=triplet
//	POST   /proxy/pause {"retry_after_seconds","reason"} · POST /proxy/resume · GET /proxy/state
//	POST   /proxy/rollout/{id}/attempt/{aid}/mode/{train|val}/openai/v1/{chat/completions|completions}
//
// An AL rollout is an agl rollout: its input is the task, is_train the
// mode, config.timeout_seconds the timeout; its metadata is kept, with
// AL's config under the reserved metadata key "_al" (what agl's controller
// reads to give the agent AL's environment). agl's attempts and retries
// stay inside: AL sees attempt "0" (the rollout's latest attempt) and its
// four states (requeuing shows as running, cancelled as failed).
//
// Errors are FastAPI's {"detail": …}. Every route but /healthz needs the
// admin key (Authorization: Bearer KEY or X-API-Key: KEY); an attempt's
// scoped key (the AGL_KEY agl's controller gives an AL agent) reaches only
// its own rollout: the LLM route, the event POST and the two reads (the
// rollout, its events less the controller's).
package al

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// DefaultPrefix is where the gateway mounts the API.
const DefaultPrefix = "/al"

// MetadataKey is the reserved key of an agl rollout's metadata holding
// what AL's rollout carries beyond agl's model ({"config": RolloutConfig}).
const MetadataKey = api.ALMetadataKey

// Config is the `al:` section of agl.yaml.
type Config struct {
	// Prefix is the path the API is served under (default /al; "off"
	// serves none).
	Prefix string `yaml:"prefix"`
	// ModelName is AL's default_proxy.model_name: the registered model
	// whose endpoints serve the agent route, whatever the request names
	// (default: the engine's model name). AL's trainer registers its vLLM
	// servers under actor_rollout_ref.model.path: set it to that.
	ModelName string `yaml:"model_name"`
	// Train and Val force the sampling temperature per mode (AL's
	// defaults: 1 and 0.7).
	Train ModeConfig `yaml:"train"`
	Val   ModeConfig `yaml:"val"`
	// MaxAttempts is agl's attempts per AL rollout (default 1, as AL).
	MaxAttempts int `yaml:"max_attempts"`
	// Purge makes DELETE /api/rollouts/{id} remove the rollout's data; by
	// default agl keeps it (a soft delete: AL no longer sees it, agl's
	// API and dashboard still do). ?purge=true purges one.
	Purge bool `yaml:"purge"`
}

// ModeConfig is what AL forces on the calls of one mode.
type ModeConfig struct {
	Temperature *float64 `yaml:"temperature"`
}

// Enabled reports whether the API is to be served.
func (c Config) Enabled() bool { return c.Prefix != "off" }

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	c.Prefix = "/" + strings.Trim(c.Prefix, "/")
	if c.Train.Temperature == nil {
		t := 1.0
		c.Train.Temperature = &t
	}
	if c.Val.Temperature == nil {
		t := 0.7
		c.Val.Temperature = &t
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 1
	}
	return c
}

// LLM is agl's proxy (proxy.Proxy), with its token state and
// model_request events: ServeHTTP serves /r/{rollout}/{attempt}/… for an
// attempt's scoped key (checked again there, revocations included);
// ServeTrusted serves a call for the admin key.
type LLM interface {
	http.Handler
	ServeTrusted(w http.ResponseWriter, r *http.Request, rolloutID, attemptID, route string)
}

// Options configure a Handler.
type Options struct {
	Config Config
	Store  store.Store
	// Late appends events to ended attempts and purges rollouts (nil: the
	// store cannot; such requests get 409 / 501).
	Late store.LateWriter
	// IsAdmin reports whether a request carries the admin key (the
	// gateway's check, constant-time).
	IsAdmin func(*http.Request) bool
	// LLM serves the agent route; nil answers it 503.
	LLM LLM
	// DefaultModel is the engine's model name, the default ModelName.
	DefaultModel string
	// MaxAbsReward bounds |reward| of posted reward events.
	MaxAbsReward float64
	// MaxEventBytes bounds a posted event's data as JSON (the gateway's
	// max_stored_call_bytes; 0: api.DefaultMaxStoredCallBytes, negative:
	// none). Stricter than the proxy routes' bound, which measures the
	// compact stored form: an /al event is measured before encoding.
	MaxEventBytes int64
	// Notify is called after a change that may end a rollout (the
	// gateway's long-poll wake-up).
	Notify func()
	// ModelsChanged, if set, is called after a model registration or
	// deletion was stored (the live routing table's sync), before the
	// answer.
	ModelsChanged func(ctx context.Context)
	Logger        *slog.Logger
	// Shared, if set, carries the proxy pause state to every gateway
	// replica on the store (Watch applies theirs here).
	Shared store.Shared
	// WaitPoll is how often Watch re-reads the shared pause state when no
	// notification came (default 1s).
	WaitPoll time.Duration
}

// Handler serves the API. Mount it under Config.Prefix with the prefix
// stripped (http.StripPrefix).
type Handler struct {
	opt   Options
	cfg   Config
	log   *slog.Logger
	mux   *http.ServeMux
	pause pauseState

	// servers caches whether ModelName has endpoints (authTTL; dropped
	// when this handler changes models).
	serversMu sync.Mutex
	servers   struct {
		ok    bool
		until time.Time
	}

	// auth caches verified scoped keys of the agent route (authTTL).
	authMu sync.Mutex
	auth   map[authKey]authEntry

	// beats is when this process last refreshed the heartbeat of each
	// externally run rollout's attempt (beat).
	beatMu sync.Mutex
	beats  map[string]time.Time

	// ext caches the running external attempt of (rollout, AL attempt)
	// for the server key's calls (authTTL).
	extMu sync.Mutex
	ext   map[[2]string]authEntry
}

// authTTL is how long a verified scoped key is trusted on the agent route
// without asking the store; the proxy then checks it again (its own cache
// forgets revoked keys), so a revoked key gets no model call. Event posts
// always ask the store.
const authTTL = time.Second

type authKey struct {
	rid, aid string
	sum      [sha256.Size]byte
}

type authEntry struct {
	attempt string
	until   time.Time
}

// scopedAttempt is the request context key of the agl attempt a scoped
// key was verified for.
type scopedAttempt struct{}

// New returns the handler.
func New(opt Options) *Handler {
	opt.Config = opt.Config.WithDefaults()
	if opt.Config.ModelName == "" {
		opt.Config.ModelName = opt.DefaultModel
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Notify == nil {
		opt.Notify = func() {}
	}
	h := &Handler{opt: opt, cfg: opt.Config, log: opt.Logger, mux: http.NewServeMux(), auth: map[authKey]authEntry{}, beats: map[string]time.Time{}, ext: map[[2]string]authEntry{}}
	h.pause.retryAfter = 5
	h.routes()
	return h
}

// Prefix is where the handler is to be mounted.
func (h *Handler) Prefix() string { return h.cfg.Prefix }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// access is who may call a route.
type access int

const (
	admin access = iota
	// attemptKey also admits the scoped key of the rollout's attempt
	// named by {id} and {aid} (the latest attempt on a route without
	// {aid}: the rollout's own reads).
	attemptKey
	public
)

type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (h *Handler) routes() {
	add := func(pattern string, a access, fn handlerFunc) {
		h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			aid, err := h.authorize(r, a, strings.HasPrefix(pattern, "POST /proxy/rollout/"))
			if err != nil {
				writeError(w, h.log, err)
				return
			}
			if aid != "" {
				r = r.WithContext(context.WithValue(r.Context(), scopedAttempt{}, aid))
			}
			if err := fn(w, r); err != nil {
				writeError(w, h.log, err)
			}
		})
	}
	add("GET /healthz", public, func(w http.ResponseWriter, r *http.Request) error {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return nil
	})
	add("GET /openapi.json", public, h.openAPI)
	add("POST /api/models", admin, h.registerModels)
	add("DELETE /api/models", admin, h.deleteModels)
	add("POST /api/rollouts", admin, h.createRollouts)
	add("GET /api/rollouts", admin, h.listRollouts)
	add("GET /api/rollouts/terminal", admin, h.terminal)
	add("GET /api/rollouts/{id}", attemptKey, h.getRollout)
	add("PATCH /api/rollouts/{id}", admin, h.patchRollout)
	add("DELETE /api/rollouts/{id}", admin, h.deleteRollout)
	add("POST /api/rollouts/{id}/attempt/{aid}/events", attemptKey, h.postEvent)
	add("GET /api/rollouts/{id}/events", attemptKey, h.listEvents)
	add("POST /proxy/pause", admin, h.pauseProxy)
	add("POST /proxy/resume", admin, h.resumeProxy)
	add("GET /proxy/state", admin, h.proxyState)
	add("POST /proxy/rollout/{id}/attempt/{aid}/mode/{mode}/openai/v1/{path...}", attemptKey, h.agentCall)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// FastAPI answers a known path with another method 405.
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete} {
			r2 := r.Clone(r.Context())
			r2.Method = m
			if _, pattern := h.mux.Handler(r2); m != r.Method && pattern != "/" {
				writeError(w, h.log, detailf(http.StatusMethodNotAllowed, "Method Not Allowed"))
				return
			}
		}
		writeError(w, h.log, detailf(http.StatusNotFound, "Not Found"))
	})
}

// httpError is an answer in FastAPI's shape: {"detail": Detail}.
type httpError struct {
	Status int
	Detail any
	Header http.Header
}

func (e *httpError) Error() string { return fmt.Sprint(e.Detail) }

func detailf(status int, format string, args ...any) *httpError {
	return &httpError{Status: status, Detail: fmt.Sprintf(format, args...)}
}

// validation is a 422 in the shape of FastAPI's request validation errors.
func validation(loc []any, msg string) *httpError {
	return &httpError{Status: http.StatusUnprocessableEntity, Detail: []map[string]any{{"type": "value_error", "loc": loc, "msg": msg}}}
}

func writeJSON(w http.ResponseWriter, status int, v any) { api.WriteJSON(w, status, v) }

// writeError answers err as {"detail": …}: store sentinels with 404, 409,
// 422 (invalid), 403; anything else is logged and answered 500 without its
// text.
func writeError(w http.ResponseWriter, log *slog.Logger, err error) {
	var he *httpError
	status, detail := http.StatusInternalServerError, any("Internal Server Error")
	switch {
	case errors.As(err, &he):
		status, detail = he.Status, he.Detail
		for k, v := range he.Header {
			w.Header()[k] = v
		}
	case errors.Is(err, store.ErrNotFound):
		status, detail = http.StatusNotFound, err.Error()
	case errors.Is(err, store.ErrConflict):
		status, detail = http.StatusConflict, err.Error()
	case errors.Is(err, store.ErrInvalid):
		status, detail = http.StatusUnprocessableEntity, err.Error()
	case errors.Is(err, store.ErrForbidden):
		status, detail = http.StatusForbidden, err.Error()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		status, detail = http.StatusServiceUnavailable, "request cancelled"
	default:
		log.Error("al: request failed", "err", err)
	}
	writeJSON(w, status, map[string]any{"detail": detail})
}

var errAuth = &httpError{Status: http.StatusUnauthorized, Detail: "Invalid or missing API key"}

// authorize admits the admin key on every route and, on attemptKey routes,
// the scoped key of the attempt {aid} ("0": the latest) of rollout {id}:
// then it returns that agl attempt's id. cached allows a verification up
// to authTTL old.
func (h *Handler) authorize(r *http.Request, a access, cached bool) (string, error) {
	if a == public || h.opt.IsAdmin == nil || h.opt.IsAdmin(r) {
		return "", nil
	}
	key, err := api.RequestKey(r)
	if err != nil || key == "" || a != attemptKey || !strings.HasPrefix(key, store.KeyPrefix) {
		return "", errAuth
	}
	ak := authKey{rid: r.PathValue("id"), aid: r.PathValue("aid"), sum: sha256.Sum256([]byte(key))}
	if ak.aid == "" {
		// A read of the rollout itself: the key of its latest attempt.
		ak.aid = DefaultAttemptID
	}
	if cached {
		h.authMu.Lock()
		e, ok := h.auth[ak]
		h.authMu.Unlock()
		if ok && time.Now().Before(e.until) {
			return e.attempt, nil
		}
	}
	ro, err := h.opt.Store.GetRollout(r.Context(), ak.rid)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return "", errAuth
		}
		return "", err
	}
	at, ok := attemptOf(ro, ak.aid)
	if !ok {
		return "", errAuth
	}
	if _, err := h.opt.Store.AttemptByKey(r.Context(), ro.ID, at.ID, key); err != nil {
		if errors.Is(err, store.ErrForbidden) || errors.Is(err, store.ErrNotFound) {
			return "", errAuth
		}
		return "", err
	}
	h.authMu.Lock()
	if len(h.auth) >= 1<<16 {
		clear(h.auth)
	}
	h.auth[ak] = authEntry{attempt: at.ID, until: time.Now().Add(authTTL)}
	h.authMu.Unlock()
	return at.ID, nil
}

// DefaultAttemptID is the attempt id AL's controllers use and AL sees.
const DefaultAttemptID = "0"

// attemptOf returns the agl attempt AL's attempt id names: "0" is the
// latest; an agl attempt id names itself.
func attemptOf(ro store.Rollout, aid string) (store.Attempt, bool) {
	if len(ro.Attempts) == 0 {
		return store.Attempt{}, false
	}
	if aid == DefaultAttemptID {
		return slices.MaxFunc(ro.Attempts, func(a, b store.Attempt) int { return a.Number - b.Number }), true
	}
	for _, a := range ro.Attempts {
		if a.ID == aid {
			return a, true
		}
	}
	return store.Attempt{}, false
}

// decodeBody decodes a JSON request body into v; an empty or malformed
// body is a 422, as FastAPI answers.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return detailf(http.StatusRequestEntityTooLarge, "request body over %d bytes", mbe.Limit)
		}
		if errors.Is(err, io.EOF) {
			return validation([]any{"body"}, "Field required")
		}
		return validation([]any{"body"}, "JSON decode error: "+err.Error())
	}
	return nil
}

// pauseState is AL's ProxyPauseState: only the agent route pauses.
type pauseState struct {
	mu         sync.Mutex
	paused     bool
	retryAfter int
	reason     *string
	inflight   int
}

func asMaxBytes(err error, target **http.MaxBytesError) bool { return errors.As(err, target) }

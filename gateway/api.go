package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// access is who may call a route.
type access int

const (
	adminOnly access = iota
	// adminOrAttempt also admits the scoped key of the {id}/{aid} attempt
	// in the path (or, for reads, of the ?attempt= query parameter).
	adminOrAttempt
	public
)

type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) routes() {
	h := func(pattern string, a access, fn handlerFunc) { s.mux.Handle(pattern, s.guard(a, fn)) }
	h("GET /api/health", public, s.health)
	h("GET /api/gateway", adminOnly, s.gatewayStatus)
	h("POST /api/gateway/pause", adminOnly, s.pause)
	h("POST /api/gateway/resume", adminOnly, s.resume)
	h("POST /api/gateway/drain", adminOnly, s.drain)
	h("POST /api/rollouts", adminOnly, s.createRollouts)
	h("GET /api/rollouts", adminOnly, s.listRollouts)
	h("GET /api/rollouts/{id}", adminOnly, s.getRollout)
	h("POST /api/rollouts/{id}/cancel", adminOnly, s.cancelRollout)
	h("GET /api/rollouts/{id}/events", adminOrAttempt, s.listEvents)
	h("POST /api/claim", adminOnly, s.claim)
	h("POST /api/rollouts/{id}/attempts/{aid}/heartbeat", adminOrAttempt, s.heartbeat)
	h("POST /api/rollouts/{id}/attempts/{aid}/complete", adminOnly, s.complete)
	h("POST /api/rollouts/{id}/attempts/{aid}/revoke", adminOnly, s.revokeKey)
	h("POST /api/rollouts/{id}/attempts/{aid}/events", adminOrAttempt, s.appendEvents)
	h("GET /api/terminal", adminOnly, s.terminal)
	h("POST /api/models", adminOnly, s.registerModel)
	h("GET /api/models", adminOnly, s.listModels)
	h("POST /api/train/steps", adminOnly, s.putTrainStep)
	h("GET /api/train/steps", adminOnly, s.listTrainSteps)
	h("/api/", public, func(w http.ResponseWriter, r *http.Request) error {
		return api.Errorf(http.StatusNotFound, "no_route", "no API route %s %s", r.Method, r.URL.Path)
	})
	s.mux.HandleFunc("/r/", func(w http.ResponseWriter, r *http.Request) {
		if s.opt.LLM == nil {
			api.WriteError(w, s.log, api.Errorf(http.StatusNotFound, "no_engine", "this gateway serves no model: configure an engine"))
			return
		}
		s.opt.LLM.ServeHTTP(w, r)
	})
}

// guard checks access and turns a handler's error into a JSON error.
func (s *Server) guard(a access, fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.authorize(a, r); err != nil {
			api.WriteError(w, s.log, err)
			return
		}
		if err := fn(w, r); err != nil {
			api.WriteError(w, s.log, err)
		}
	})
}

func (s *Server) authorize(a access, r *http.Request) error {
	if a == public || s.IsAdmin(r) {
		return nil
	}
	key, err := api.RequestKey(r)
	if err != nil {
		return api.Errorf(http.StatusUnauthorized, "unauthorized", "%v", err)
	}
	if key == "" {
		return api.Errorf(http.StatusUnauthorized, "unauthorized", "missing key: send Authorization: Bearer <key> or x-api-key")
	}
	if a != adminOrAttempt || !strings.HasPrefix(key, store.KeyPrefix) {
		if strings.HasPrefix(key, store.KeyPrefix) {
			return api.Errorf(http.StatusForbidden, "forbidden", "a scoped attempt key cannot use %s %s", r.Method, r.URL.Path)
		}
		return api.Errorf(http.StatusUnauthorized, "unauthorized", "invalid key")
	}
	aid := r.PathValue("aid")
	if aid == "" {
		aid = r.URL.Query().Get("attempt")
		if aid == "" {
			return api.Errorf(http.StatusForbidden, "forbidden", "a scoped key reads only its own attempt's events: add ?attempt=<attempt id>")
		}
	}
	_, err = s.opt.Store.AttemptByKey(r.Context(), r.PathValue("id"), aid, key)
	return err
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": s.opt.Version})
	return nil
}

func (s *Server) gatewayStatus(w http.ResponseWriter, r *http.Request) error {
	st, err := s.Status(r.Context())
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, st)
	return nil
}

// Status is what GET /api/gateway answers: version, whether the LLM routes
// are paused, calls in flight, rollouts by status; with Options.Shared this
// replica's id and the live replicas' reports.
func (s *Server) Status(ctx context.Context) (api.GatewayStatus, error) {
	st := api.GatewayStatus{Version: s.opt.Version, LLM: s.opt.LLM != nil}
	if s.opt.LLM != nil {
		st.Paused, st.InFlight = s.opt.LLM.Status()
	}
	var err error
	if st.Counts, err = s.opt.Store.CountRollouts(ctx); err != nil {
		return st, err
	}
	if s.opt.Shared != nil && s.opt.LLM != nil {
		st.Replica = s.replica
		st.Replicas, err = s.opt.Shared.Replicas(ctx, replicaStale)
	}
	return st, err
}

func (s *Server) llm() (LLM, error) {
	if s.opt.LLM == nil {
		return nil, api.Errorf(http.StatusConflict, "no_engine", "this gateway serves no model")
	}
	return s.opt.LLM, nil
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request) error {
	l, err := s.llm()
	if err != nil {
		return err
	}
	l.Pause()
	if err := s.sharePause(r.Context(), true); err != nil {
		return err
	}
	return s.gatewayStatus(w, r)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) error {
	l, err := s.llm()
	if err != nil {
		return err
	}
	l.Resume()
	if err := s.sharePause(r.Context(), false); err != nil {
		return err
	}
	return s.gatewayStatus(w, r)
}

// sharePause stores the pause state for the other replicas (Options.Shared).
func (s *Server) sharePause(ctx context.Context, paused bool) error {
	if s.opt.Shared == nil {
		return nil
	}
	v, _ := json.Marshal(pauseValue{Paused: paused})
	if err := s.opt.Shared.PutSetting(ctx, PauseSetting, v); err != nil {
		return fmt.Errorf("share the pause state with the other replicas: %w", err)
	}
	return nil
}

func (s *Server) drain(w http.ResponseWriter, r *http.Request) error {
	l, err := s.llm()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryDuration(r, "timeout", 60*time.Second, 10*time.Minute))
	defer cancel()
	if err := l.Drain(ctx); err != nil {
		return api.Errorf(http.StatusServiceUnavailable, "drain_timeout", "calls still in flight: %v", err)
	}
	if s.opt.Shared != nil {
		// Then the other replicas' (pause them first, through any one).
		if err := s.drainReplicas(ctx); err != nil {
			return api.Errorf(http.StatusServiceUnavailable, "drain_timeout", "calls still in flight on another replica: %v", err)
		}
	}
	return s.gatewayStatus(w, r)
}

func (s *Server) createRollouts(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateRolloutsRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if len(req.Rollouts) == 0 {
		return api.Errorf(http.StatusBadRequest, "invalid_request", "rollouts is empty")
	}
	if len(req.Rollouts) > 10000 {
		return api.Errorf(http.StatusBadRequest, "invalid_request", "at most 10000 rollouts per request, got %d", len(req.Rollouts))
	}
	rs, err := s.opt.Store.CreateRollouts(r.Context(), req.Rollouts)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, api.RolloutsResponse{Rollouts: rs})
	return nil
}

func (s *Server) listRollouts(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := store.RolloutFilter{GroupID: q.Get("group"), Mode: store.Mode(q.Get("mode")), Desc: q.Get("order") == "desc"}
	if o := q.Get("order"); o != "" && o != "asc" && o != "desc" {
		return api.Errorf(http.StatusBadRequest, "invalid_request", "order %q is not asc or desc", o)
	}
	if f.Mode != "" && !f.Mode.Valid() {
		return api.Errorf(http.StatusBadRequest, "invalid_request", "mode %q is not train or val", f.Mode)
	}
	for _, v := range q["status"] {
		for _, st := range strings.Split(v, ",") {
			rs := store.RolloutStatus(st)
			if !rs.Valid() {
				return api.Errorf(http.StatusBadRequest, "invalid_request", "status %q is not a rollout status", st)
			}
			f.Status = append(f.Status, rs)
		}
	}
	var err error
	if f.Cursor, err = queryInt(q.Get("cursor"), "cursor"); err != nil {
		return err
	}
	if v := q.Get("step"); v != "" {
		n, err := queryInt(v, "step")
		if err != nil {
			return err
		}
		f.Step = &n
	}
	limit, err := queryInt(q.Get("limit"), "limit")
	if err != nil {
		return err
	}
	f.Limit = int(limit)
	for _, b := range []struct {
		name string
		dst  **float64
	}{{"min_reward", &f.MinReward}, {"max_reward", &f.MaxReward}} {
		if v := q.Get(b.name); v != "" {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
				return api.Errorf(http.StatusBadRequest, "invalid_request", "%s %q is not a finite number", b.name, v)
			}
			*b.dst = &x
		}
	}
	rs, next, err := s.opt.Store.ListRollouts(r.Context(), f)
	if err != nil {
		return err
	}
	if rs == nil {
		rs = []store.Rollout{}
	}
	api.WriteJSON(w, http.StatusOK, api.RolloutsResponse{Rollouts: rs, NextCursor: next})
	return nil
}

func queryInt(v, name string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, api.Errorf(http.StatusBadRequest, "invalid_request", "%s %q is not a non-negative integer", name, v)
	}
	return n, nil
}

// queryDuration reads a duration parameter ("30s", or seconds as a number).
func queryDuration(r *http.Request, name string, def, max time.Duration) time.Duration {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil {
			return def
		}
		d = time.Duration(f * float64(time.Second))
	}
	return min(max, d)
}

func (s *Server) getRollout(w http.ResponseWriter, r *http.Request) error {
	ro, err := s.opt.Store.GetRollout(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, ro)
	return nil
}

func (s *Server) cancelRollout(w http.ResponseWriter, r *http.Request) error {
	var req api.CancelRequest
	if r.ContentLength != 0 {
		if err := decode(r, &req); err != nil {
			return err
		}
	}
	ro, err := s.opt.Store.CancelRollout(r.Context(), r.PathValue("id"), req.Reason)
	if err != nil {
		return err
	}
	s.changes.broadcast()
	api.WriteJSON(w, http.StatusOK, ro)
	return nil
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := store.EventFilter{RolloutID: r.PathValue("id"), AttemptID: q.Get("attempt")}
	for _, v := range q["type"] {
		f.Types = append(f.Types, strings.Split(v, ",")...)
	}
	var err error
	if f.AfterSeq, err = queryInt(q.Get("after"), "after"); err != nil {
		return err
	}
	limit, err := queryInt(q.Get("limit"), "limit")
	if err != nil {
		return err
	}
	f.Limit = int(limit)
	var evs []store.Event
	if agent, ok := q["agent"]; ok {
		if err := api.ValidAgentName(agent[0]); err != nil {
			return api.Errorf(http.StatusBadRequest, "invalid_request", "agent: %v", err)
		}
		evs, err = s.agentEvents(r.Context(), f, agent[0])
	} else {
		evs, err = s.opt.Store.ListEvents(r.Context(), f)
	}
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, api.EventsResponse{Events: evs})
	return nil
}

// agentEvents lists the model_request events of f recorded for agent
// (api.ModelCall.Agent), at most f.Limit of them: the store is paged
// through, the filter applied here.
func (s *Server) agentEvents(ctx context.Context, f store.EventFilter, agent string) ([]store.Event, error) {
	if len(f.Types) > 0 && !slices.Contains(f.Types, store.EventModelRequest) {
		return []store.Event{}, nil
	}
	f.Types = []string{store.EventModelRequest}
	want := f.Limit
	const page = 500
	out := []store.Event{}
	for {
		f.Limit = page
		evs, err := s.opt.Store.ListEvents(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			var c struct {
				Agent string `json:"agent"`
			}
			if json.Unmarshal(e.Data, &c) == nil && c.Agent == agent {
				out = append(out, e)
				if want > 0 && len(out) == want {
					return out, nil
				}
			}
		}
		if len(evs) < page {
			return out, nil
		}
		f.AfterSeq = evs[len(evs)-1].Seq
	}
}

func (s *Server) claim(w http.ResponseWriter, r *http.Request) error {
	var req api.ClaimRequest
	if r.ContentLength != 0 {
		if err := decode(r, &req); err != nil {
			return err
		}
	}
	c, err := s.opt.Store.Claim(r.Context(), req)
	if errors.Is(err, store.ErrNoneQueued) {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, c)
	return nil
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) error {
	a, err := s.opt.Store.Heartbeat(r.Context(), r.PathValue("id"), r.PathValue("aid"))
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, a)
	return nil
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request) error {
	var req api.CompleteRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	ro, err := s.opt.Store.CompleteAttempt(r.Context(), r.PathValue("id"), r.PathValue("aid"), req.Status, req.Error)
	if err != nil {
		return err
	}
	s.changes.broadcast()
	api.WriteJSON(w, http.StatusOK, ro)
	return nil
}

// keyForgetter is an LLM that caches verified scoped keys (the proxy).
type keyForgetter interface {
	ForgetKey(rolloutID, attemptID string)
}

// revokeKey kills the attempt's scoped key in the store and in this
// gateway's key cache: the controller calls it the moment the harness
// exits, before the evaluator runs.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	rid, aid := r.PathValue("id"), r.PathValue("aid")
	if err := s.opt.Store.RevokeKey(r.Context(), rid, aid); err != nil {
		return err
	}
	if f, ok := s.opt.LLM.(keyForgetter); ok {
		f.ForgetKey(rid, aid)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) appendEvents(w http.ResponseWriter, r *http.Request) error {
	var req api.AppendEventsRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if len(req.Events) == 0 {
		return api.Errorf(http.StatusBadRequest, "invalid_request", "events is empty")
	}
	if len(req.Events) > store.MaxEventsPerRequest {
		return api.Errorf(http.StatusBadRequest, "invalid_request", "events: at most %d per request, got %d", store.MaxEventsPerRequest, len(req.Events))
	}
	// A scoped key is the harness (even on a gateway without an admin
	// key): it appends harness types only.
	harness := !s.IsAdmin(r) || strings.HasPrefix(RequestKey(r), store.KeyPrefix)
	if fe := api.CheckEvents(req.Events, harness, s.opt.MaxAbsReward); fe != nil {
		code := "invalid_request"
		if fe.Status == http.StatusForbidden {
			code = "forbidden"
		}
		return api.Errorf(fe.Status, code, "%s", fe.Error())
	}
	evs, err := s.opt.Store.AppendEvents(r.Context(), r.PathValue("id"), r.PathValue("aid"), req.Events)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, api.EventsResponse{Events: evs})
	return nil
}

// terminal streams finished rollouts: ?after=CURSOR&limit=N&wait=30s waits
// up to wait (at most 60s) for at least one.
func (s *Server) terminal(w http.ResponseWriter, r *http.Request) error {
	after, err := queryInt(r.URL.Query().Get("after"), "after")
	if err != nil {
		return err
	}
	limit, err := queryInt(r.URL.Query().Get("limit"), "limit")
	if err != nil {
		return err
	}
	deadline := time.Now().Add(queryDuration(r, "wait", 0, 60*time.Second))
	for {
		local, shared := s.changed()
		rs, err := s.opt.Store.Terminal(r.Context(), after, int(limit))
		if err != nil {
			return err
		}
		left := time.Until(deadline)
		if len(rs) > 0 || left <= 0 || s.closing.Load() {
			next := after
			if len(rs) > 0 {
				next = rs[len(rs)-1].TerminalSeq
			}
			api.WriteJSON(w, http.StatusOK, api.RolloutsResponse{Rollouts: rs, NextCursor: next})
			return nil
		}
		// Wake on a change (this process', or with Options.Shared any
		// replica's), else poll: a missed notification only delays.
		t := time.NewTimer(min(left, s.opt.WaitPoll))
		select {
		case <-local:
		case <-shared:
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return r.Context().Err()
		}
		t.Stop()
	}
}

func (s *Server) registerModel(w http.ResponseWriter, r *http.Request) error {
	var m store.Model
	if err := decode(r, &m); err != nil {
		return err
	}
	for i, ep := range m.Endpoints {
		if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return api.Errorf(http.StatusBadRequest, "invalid_request", "endpoints[%d]: %q is not an http:// or https:// base URL (e.g. http://10.0.0.5:8000/v1)", i, ep)
		}
	}
	m, err := s.opt.Store.RegisterModel(r.Context(), m)
	if err != nil {
		return err
	}
	if s.opt.ModelsChanged != nil {
		s.opt.ModelsChanged(r.Context())
	}
	api.WriteJSON(w, http.StatusOK, m)
	return nil
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) error {
	ms, err := s.opt.Store.ListModels(r.Context(), r.URL.Query().Get("name"))
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, api.ModelsResponse{Models: ms})
	return nil
}

func (s *Server) putTrainStep(w http.ResponseWriter, r *http.Request) error {
	var t store.TrainStep
	if err := decode(r, &t); err != nil {
		return err
	}
	if err := s.opt.Store.PutTrainStep(r.Context(), t); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listTrainSteps(w http.ResponseWriter, r *http.Request) error {
	steps, err := s.opt.Store.ListTrainSteps(r.Context(), r.URL.Query().Get("run"))
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, api.TrainStepsResponse{Steps: steps})
	return nil
}

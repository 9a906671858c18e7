package al

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"time"

	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// pauseBody is AL's PauseRequest.
type pauseBody struct {
	RetryAfterSeconds *int    `json:"retry_after_seconds"`
	Reason            *string `json:"reason"`
}

// pauseView is AL's PauseStateResponse.
type pauseView struct {
	Paused            bool    `json:"paused"`
	RetryAfterSeconds int     `json:"retry_after_seconds"`
	Reason            *string `json:"reason"`
	Inflight          int     `json:"inflight"`
}

func (p *pauseState) view() pauseView {
	return pauseView{Paused: p.paused, RetryAfterSeconds: p.retryAfter, Reason: p.reason, Inflight: p.inflight}
}

// pauseProxy stops new agent calls (429) while those past the pause check
// drain; inflight counts them.
func (h *Handler) pauseProxy(w http.ResponseWriter, r *http.Request) error {
	var body pauseBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	p := &h.pause
	p.mu.Lock()
	p.paused = true
	p.retryAfter = 5
	if body.RetryAfterSeconds != nil {
		p.retryAfter = *body.RetryAfterSeconds
	}
	p.reason = body.Reason
	v := p.view()
	p.mu.Unlock()
	if err := h.sharePause(r.Context(), v); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (h *Handler) resumeProxy(w http.ResponseWriter, r *http.Request) error {
	p := &h.pause
	p.mu.Lock()
	p.paused = false
	p.reason = nil
	v := p.view()
	p.mu.Unlock()
	if err := h.sharePause(r.Context(), v); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// PauseSetting is the store.Shared setting holding the agent route's
// pause state (pauseView without inflight) that every replica applies.
const PauseSetting = "al.pause"

// sharePause stores the pause state for the other replicas.
func (h *Handler) sharePause(ctx context.Context, v pauseView) error {
	if h.opt.Shared == nil {
		return nil
	}
	v.Inflight = 0
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := h.opt.Shared.PutSetting(ctx, PauseSetting, b); err != nil {
		return fmt.Errorf("share the pause state with the other replicas: %w", err)
	}
	return nil
}

// Watch applies the pause state other replicas share (Options.Shared)
// until ctx ends; without Shared it returns at once.
func (h *Handler) Watch(ctx context.Context) {
	if h.opt.Shared == nil {
		return
	}
	poll := h.opt.WaitPoll
	if poll <= 0 {
		poll = time.Second
	}
	store.WatchSetting(ctx, h.opt.Shared, PauseSetting, poll, func(raw json.RawMessage) {
		var v pauseView
		if err := json.Unmarshal(raw, &v); err != nil {
			h.log.Warn("al: shared pause state unreadable", "err", err)
			return
		}
		p := &h.pause
		p.mu.Lock()
		p.paused, p.retryAfter, p.reason = v.Paused, v.RetryAfterSeconds, v.Reason
		p.mu.Unlock()
	})
}

func (h *Handler) proxyState(w http.ResponseWriter, r *http.Request) error {
	p := &h.pause
	p.mu.Lock()
	v := p.view()
	p.mu.Unlock()
	writeJSON(w, http.StatusOK, v)
	return nil
}

// admit is AL's pause check: false (with the answer written) while paused,
// else the call counts as in flight until release.
func (h *Handler) admit(w http.ResponseWriter) bool {
	p := &h.pause
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
		w.Header().Set("X-Agl-Paused", "true")
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": "gateway paused", "reason": p.reason})
		return false
	}
	p.inflight++
	return true
}

func (h *Handler) release() {
	p := &h.pause
	p.mu.Lock()
	p.inflight = max(0, p.inflight-1)
	p.mu.Unlock()
}

// agentCall is AL's LLM route, answered by agl's proxy for the rollout's
// running attempt. Outcomes in AL's order: 401 (authorize), 404 mode,
// 404 path, 404 rollout, 503 no proxy, 400 bad JSON, 503 no server for
// the configured model, 429 paused, 400 stream; then the call, with the
// configured model and the mode's temperature forced (agl records the
// token ids and log-probs AL asks vLLM for itself).
func (h *Handler) agentCall(w http.ResponseWriter, r *http.Request) error {
	mode, path := r.PathValue("mode"), r.PathValue("path")
	if mode != "train" && mode != "val" {
		return detailf(http.StatusNotFound, "Unsupported proxy mode: %s", mode)
	}
	if path != "chat/completions" && path != "completions" {
		return detailf(http.StatusNotFound, "Unsupported upstream path: %s", path)
	}
	ctx := r.Context()
	rid := r.PathValue("id")
	// A scoped key was just verified for a running attempt of this rollout
	// (the proxy checks again); the admin key may name any rollout.
	scoped, _ := ctx.Value(scopedAttempt{}).(string)
	var ro store.Rollout
	ext, cached := "", false
	if scoped == "" {
		if ext, cached = h.cachedExternal(rid, r.PathValue("aid")); !cached {
			var err error
			if ro, _, err = h.visible(ctx, rid, false); err != nil {
				return err
			}
		}
	}
	if h.opt.LLM == nil {
		return detailf(http.StatusServiceUnavailable, "Proxy not configured")
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if asMaxBytes(err, &mbe) {
			return detailf(http.StatusRequestEntityTooLarge, "request body over %d bytes", mbe.Limit)
		}
		return detailf(http.StatusBadRequest, "read request body: %v", err)
	}
	body := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &body); err != nil {
			var v any
			if json.Unmarshal(raw, &v) == nil {
				return detailf(http.StatusBadRequest, "Request body must be a JSON object")
			}
			return detailf(http.StatusBadRequest, "Invalid JSON in request body")
		}
	}
	name := h.cfg.ModelName
	if ok, err := h.hasServers(r); err != nil {
		return err
	} else if !ok {
		return detailf(http.StatusServiceUnavailable, "No servers available for model '%s'", name)
	}
	temp := *h.cfg.Train.Temperature
	if mode == "val" {
		temp = *h.cfg.Val.Temperature
	}
	body["model"], _ = json.Marshal(name)
	body["temperature"], _ = json.Marshal(temp)
	// AL's ProxyRouter.prepare_body (proxy.py lines 62-81): the agent's
	// body with the model, the mode's temperature and return_token_ids
	// set, and logprobs in train mode; sent upstream as is.
	up := maps.Clone(body)
	up["return_token_ids"] = json.RawMessage("true")
	if mode == "train" {
		up["logprobs"] = json.RawMessage("true")
	}
	upstreamBody, err := json.Marshal(up)
	if err != nil {
		return err
	}
	// agl's proxy reads the rest (its record, its checks) from the body
	// without the fields it sets itself.
	for _, k := range []string{"return_token_ids", "logprobs", "top_logprobs"} {
		delete(body, k)
	}
	if !h.admit(w) {
		return nil
	}
	defer h.release()
	if s, ok := body["stream"]; ok && !bytes.Equal(s, []byte("false")) && !bytes.Equal(s, []byte("null")) {
		return detailf(http.StatusBadRequest, "Streaming responses are not supported")
	}
	prepared, err := json.Marshal(body)
	if err != nil {
		return err
	}
	// Forwarded and answered as AL's proxy does (proxy.WithVerbatim).
	r2 := r.Clone(proxy.WithVerbatim(ctx, upstreamBody))
	r2.Body = io.NopCloser(bytes.NewReader(prepared))
	r2.ContentLength = int64(len(prepared))
	r2.Header.Set("Content-Type", "application/json")
	if scoped != "" {
		r2.URL.Path = "/r/" + rid + "/" + scoped + "/v1/" + path
		r2.URL.RawPath = ""
		h.opt.LLM.ServeHTTP(w, r2)
		return nil
	}
	if cached {
		h.opt.LLM.ServeTrusted(w, r2, rid, ext, "v1/"+path)
		return nil
	}
	ro, at, err := h.writeTarget(ctx, ro, r.PathValue("aid"), true)
	if err != nil {
		return err
	}
	if at.Status != store.AttemptRunning {
		return detailf(http.StatusConflict, "Rollout %s has no running attempt %s", ro.ID, r.PathValue("aid"))
	}
	if at.WorkerID != ExternalWorker {
		// An agent agl's controller runs calls with its own key; a call
		// with the server key is another controller's agent (AL's
		// LocalReconciler spawns before its PATCH to running, which agl's
		// claim beat): it does not run this rollout.
		return detailf(http.StatusConflict, "Rollout %s is run by agl's controller (attempt %d): its agent calls with its own key", ro.ID, at.Number)
	}
	h.beat(ctx, ro.ID, at.ID)
	h.cacheExternal(ro.ID, r.PathValue("aid"), at.ID)
	h.opt.LLM.ServeTrusted(w, r2, ro.ID, at.ID, "v1/"+path)
	return nil
}

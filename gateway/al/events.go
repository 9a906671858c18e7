package al

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// Event is AL's Event.
type Event struct {
	EventType string         `json:"event_type"`
	RolloutID string         `json:"rollout_id"`
	AttemptID string         `json:"attempt_id"`
	Timestamp float64        `json:"timestamp"`
	Data      map[string]any `json:"data"`
}

// alSourceKey holds the "source" of a reward AL's side posted: in agl a
// reward's source is what the controller sets (evaluator, reward file),
// which a harness may not claim; AL's RewardData.source is free text.
const alSourceKey = "al_source"

// toEvent renders an agl event as AL's (attempt "0"); versions maps the
// model versions AL registered to AL's numbers (alVersions; nil: none).
func toEvent(ev store.Event, versions map[string]map[int64]int64) Event {
	out := Event{EventType: ev.Type, RolloutID: ev.RolloutID, AttemptID: DefaultAttemptID, Timestamp: seconds(ev.Time)}
	if ev.Type == store.EventModelRequest {
		var mc api.ModelCall
		// The gateway's own events (api.ModelCall, API always set); one an
		// admin posted in AL's shape passes through as posted.
		if err := json.Unmarshal(ev.Data, &mc); err == nil && mc.API != "" {
			if v, ok := versions[mc.Model][mc.ModelVersion]; ok {
				mc.ModelVersion = v
			}
			out.Data = modelRequestData(mc)
			return out
		}
	}
	var data any
	dec := json.NewDecoder(bytes.NewReader(ev.Data))
	dec.UseNumber()
	if err := dec.Decode(&data); err != nil {
		data = nil
	}
	m, ok := data.(map[string]any)
	if !ok {
		m = map[string]any{"value": data}
	}
	if s, ok := m[alSourceKey]; ok && ev.Type == store.EventReward {
		if _, has := m["source"]; !has {
			m["source"] = s
		}
		delete(m, alSourceKey)
	}
	out.Data = m
	return out
}

// modelRequestData is AL's ModelRequestData for an agl model call, with
// the vLLM fields AL's triplet view reads put where vLLM puts them:
// prompt_token_ids at the top of a chat completion (per choice for a
// completion), and each choice's token_ids and logprobs.
func modelRequestData(mc api.ModelCall) map[string]any {
	if mc.Status == api.CallError {
		return errorRequestData(mc)
	}
	var resp map[string]any
	if dec := json.NewDecoder(bytes.NewReader(mc.Response)); dec.Decode(&resp) != nil || resp == nil {
		resp = map[string]any{}
	}
	var req any = map[string]any{}
	if len(mc.Request) > 0 {
		_ = json.Unmarshal(mc.Request, &req)
	}
	var finish any
	if choices, ok := resp["choices"].([]any); ok && len(choices) > 0 {
		if c0, ok := choices[0].(map[string]any); ok {
			if !mc.NoTokenIDs {
				c0["token_ids"] = ints(mc.ResponseIDs)
				if mc.API == api.ShapeCompletions {
					c0["prompt_token_ids"] = ints(mc.PromptIDs)
				}
			}
			// No log-probs recorded: none in the response, so AL's triplet
			// reads null (_extract_choice_log_probs), not [].
			if !mc.NoTokenIDs && len(mc.ResponseLogprobs) > 0 {
				lps := make([]any, len(mc.ResponseLogprobs))
				for i, lp := range mc.ResponseLogprobs {
					lps[i] = float64(lp)
				}
				if mc.API == api.ShapeCompletions {
					c0["logprobs"] = map[string]any{"token_logprobs": lps}
				} else {
					content := make([]any, len(lps))
					for i, lp := range lps {
						content[i] = map[string]any{"logprob": lp}
					}
					c0["logprobs"] = map[string]any{"content": content}
				}
			}
			if s, ok := c0["finish_reason"].(string); ok && s != "" {
				finish = s
			}
		}
	}
	if !mc.NoTokenIDs && mc.API != api.ShapeCompletions {
		resp["prompt_token_ids"] = ints(mc.PromptIDs)
	}
	var usage any
	if u, ok := resp["usage"].(map[string]any); ok {
		usage = u
	}
	return map[string]any{
		"model":         mc.Model,
		"model_version": mc.ModelVersion,
		"request":       req,
		"response":      resp,
		"server":        map[string]any{"model": mc.Model, "version": mc.ModelVersion},
		"latency_ms":    mc.LatencyMS,
		"http_status":   http.StatusOK,
		"status":        "ok",
		"retry_count":   mc.Retries,
		"usage":         usage,
		"finish_reason": finish,
		"call_id":       mc.CallID,
	}
}

// errorRequestData is AL's model_request record of a call answered with
// an error (agentlightning/server/proxy.py forward_request and
// _capture_event at v1.0.0): the body the caller got as the response (on
// /al the upstream's own), its status, status "error", no token ids.
func errorRequestData(mc api.ModelCall) map[string]any {
	var resp any
	dec := json.NewDecoder(strings.NewReader(mc.Error))
	dec.UseNumber()
	if dec.Decode(&resp) != nil {
		resp = nil
	}
	if _, ok := resp.(map[string]any); !ok {
		resp = map[string]any{}
	}
	return map[string]any{
		"model":         mc.Model,
		"model_version": mc.ModelVersion,
		"request":       map[string]any{},
		"response":      resp,
		"server":        map[string]any{"model": mc.Model, "version": mc.ModelVersion},
		"latency_ms":    mc.LatencyMS,
		"http_status":   mc.HTTPStatus,
		"status":        "error",
		"retry_count":   mc.Retries,
		"usage":         nil,
		"finish_reason": nil,
		"call_id":       mc.CallID,
	}
}

func ints(ids []int32) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// trimModelRequest is AL's _trim_model_request.
func trimModelRequest(data map[string]any) map[string]any {
	prompt, response := []any{}, []any{}
	var logprobs any
	switch resp := data["response"].(type) {
	case map[string]any:
		if p, ok := resp["prompt_token_ids"].([]any); ok {
			prompt = p
		}
		if choices, ok := resp["choices"].([]any); ok && len(choices) > 0 {
			c0, _ := choices[0].(map[string]any)
			if len(prompt) == 0 {
				if p, ok := c0["prompt_token_ids"].([]any); ok {
					prompt = p
				}
			}
			if t, ok := c0["token_ids"].([]any); ok {
				response = t
			}
			if lps := choiceLogprobs(c0); lps != nil {
				logprobs = lps
			}
		}
	case []any:
		for _, chunk := range resp {
			c, _ := chunk.(map[string]any)
			if p, ok := c["prompt_token_ids"].([]any); ok && len(prompt) == 0 && len(p) > 0 {
				prompt = p
			}
			if choices, ok := c["choices"].([]any); ok && len(choices) > 0 {
				c0, _ := choices[0].(map[string]any)
				if t, ok := c0["token_ids"].([]any); ok {
					response = append(response, t...)
				}
			}
		}
	}
	srv, _ := data["server"].(map[string]any)
	out := map[string]any{
		"prompt_token_ids":   prompt,
		"response_token_ids": response,
		"response_log_probs": logprobs,
		"server":             map[string]any{"model": srv["model"], "version": srv["version"]},
	}
	for _, k := range []string{"http_status", "status"} {
		if v, ok := data[k]; ok {
			out[k] = v
		}
	}
	if resp, ok := data["response"].(map[string]any); ok {
		if e, ok := resp["error"]; ok {
			out["error"] = e
		}
	}
	return out
}

// choiceLogprobs is AL's _extract_choice_log_probs: nil when missing or
// not all finite numbers.
func choiceLogprobs(c map[string]any) []any {
	lp, ok := c["logprobs"].(map[string]any)
	if !ok {
		return nil
	}
	var raw []any
	if content, ok := lp["content"].([]any); ok {
		for _, item := range content {
			m, ok := item.(map[string]any)
			if !ok {
				return nil
			}
			v, ok := m["logprob"]
			if !ok {
				return nil
			}
			raw = append(raw, v)
		}
	} else if tl, ok := lp["token_logprobs"].([]any); ok {
		raw = tl
	} else {
		return nil
	}
	out := make([]any, 0, len(raw))
	for _, v := range raw {
		var f float64
		switch x := v.(type) {
		case float64:
			f = x
		case json.Number:
			var err error
			if f, err = x.Float64(); err != nil {
				return nil
			}
		default:
			return nil
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil
		}
		out = append(out, f)
	}
	return out
}

// trimReward is AL's _trim_reward.
func trimReward(data map[string]any) map[string]any {
	out := map[string]any{"value": data["value"]}
	for _, k := range []string{"source", "reason"} {
		if v, ok := data[k]; ok {
			out[k] = v
		}
	}
	return out
}

// triplets is AL's ?format=triplet: trimmed model_request and reward
// events, and of model_request events with identical prompt ids only the
// last, at its own position.
func triplets(evs []Event) []Event {
	for i := range evs {
		switch evs[i].EventType {
		case store.EventModelRequest:
			evs[i].Data = trimModelRequest(evs[i].Data)
		case store.EventReward:
			evs[i].Data = trimReward(evs[i].Data)
		}
	}
	last := map[string]int{}
	for i, e := range evs {
		if e.EventType == store.EventModelRequest {
			last[promptKey(e.Data["prompt_token_ids"])] = i
		}
	}
	out := evs[:0]
	for i, e := range evs {
		if e.EventType != store.EventModelRequest || last[promptKey(e.Data["prompt_token_ids"])] == i {
			out = append(out, e)
		}
	}
	return out
}

func promptKey(v any) string {
	ids, ok := v.([]any)
	if !ok {
		return ""
	}
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(strings.TrimSpace(jsonText(id)))
		b.WriteByte(',')
	}
	return b.String()
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func (h *Handler) listEvents(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	ro, _, err := h.visible(ctx, r.PathValue("id"), false)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	out := []Event{}
	at, ok := attemptOf(ro, DefaultAttemptID)
	t, typed := q["event_type"]
	if ok && (!typed || t[0] != "") {
		f := store.EventFilter{RolloutID: ro.ID, AttemptID: at.ID}
		if typed {
			f.Types = []string{t[0]}
		}
		evs, err := h.opt.Store.ListEvents(ctx, f)
		if err != nil {
			return err
		}
		_, scoped := ctx.Value(scopedAttempt{}).(string)
		var versions map[string]map[int64]int64
		for _, ev := range evs {
			if versions == nil && ev.Type == store.EventModelRequest {
				if versions, err = h.alVersions(ctx); err != nil {
					return err
				}
			}
			// An agent's key reads no controller events (tests, sandbox:
			// the evaluator's view of its work).
			if ev.Type != deletedEvent && ev.Type != statusEvent && !(scoped && store.ControllerOwned(ev.Type)) {
				out = append(out, toEvent(ev, versions))
			}
		}
	}
	if q.Get("format") == "triplet" {
		out = triplets(out)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) postEvent(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		EventType *string         `json:"event_type"`
		Data      json.RawMessage `json:"data"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	if body.EventType == nil {
		return validation([]any{"body", "event_type"}, "Field required")
	}
	data := map[string]any{}
	if len(body.Data) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body.Data))
		dec.UseNumber()
		if err := dec.Decode(&data); err != nil || data == nil {
			return validation([]any{"body", "data"}, "Input should be a valid dictionary")
		}
	}
	ctx := r.Context()
	admin := h.opt.IsAdmin == nil || h.opt.IsAdmin(r)
	aid := r.PathValue("aid")
	ro, _, err := h.visible(ctx, r.PathValue("id"), false)
	if err != nil {
		return err
	}
	ro, at, err := h.writeTarget(ctx, ro, aid, admin)
	if err != nil {
		return err
	}
	if s, ok := data["source"]; ok && *body.EventType == store.EventReward {
		data[alSourceKey] = s
		delete(data, "source")
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if max := h.maxEventBytes(); max > 0 && int64(len(raw)) > max {
		return detailf(http.StatusRequestEntityTooLarge, "body: data is %d bytes as JSON, more than the %d an event may store (gateway.max_stored_call_bytes): not recorded", len(raw), max)
	}
	evs := []store.NewEvent{{Type: *body.EventType, Data: raw}}
	// AL keeps a reward whatever its value (RewardData only documents the
	// shape: schemas.py line 56): one that is not a number (a boolean, a
	// string, null) is kept as posted and counts for nothing, in agl's
	// reward summary and trainer as in AL's (_as_reward_value gives None,
	// agl_rollout_manager.py line 109). Numbers keep agl's bounds.
	v, hasValue := data["value"]
	_, isNumber := v.(json.Number)
	opaque := *body.EventType == store.EventReward && hasValue && !isNumber && data["values"] == nil
	if fe := api.CheckEvents(evs, !admin, h.opt.MaxAbsReward); fe != nil && !opaque {
		status := fe.Status
		if status == http.StatusBadRequest {
			status = http.StatusUnprocessableEntity
		}
		return &httpError{Status: status, Detail: strings.Replace(fe.Field, "events[0]", "body", 1) + ": " + fe.Message}
	}
	var stored []store.Event
	if at.Status == store.AttemptRunning {
		stored, err = h.opt.Store.AppendEvents(ctx, ro.ID, at.ID, evs)
		if err == nil && at.WorkerID == ExternalWorker {
			h.beat(ctx, ro.ID, at.ID)
		}
	}
	if at.Status != store.AttemptRunning || (err != nil && admin && isConflict(err)) {
		if !admin || h.opt.Late == nil {
			return detailf(http.StatusConflict, "attempt %s of rollout %s has ended: events are closed", aid, ro.ID)
		}
		stored, err = h.opt.Late.AppendLateEvents(ctx, ro.ID, at.ID, evs)
	}
	if err != nil {
		return err
	}
	ev := toEvent(stored[0], nil)
	ev.AttemptID = aid
	writeJSON(w, http.StatusOK, ev)
	return nil
}

// maxEventBytes is Options.MaxEventBytes with its default.
func (h *Handler) maxEventBytes() int64 {
	if h.opt.MaxEventBytes == 0 {
		return api.DefaultMaxStoredCallBytes
	}
	return h.opt.MaxEventBytes
}

func isConflict(err error) bool { return errors.Is(err, store.ErrConflict) }

// writeTarget is the agl attempt a write (an event, an LLM call) to AL's
// attempt aid of rollout rid goes to. As AL accepts writes to attempt "0"
// of a queuing rollout (before a reconciler's PATCH to running), an
// admin's such write starts it for an external controller
// (startExternal); a scoped key exists only once an attempt does. ro is
// the rollout as just read (visible).
func (h *Handler) writeTarget(ctx context.Context, ro store.Rollout, aid string, admin bool) (store.Rollout, store.Attempt, error) {
	var err error
	if ro.Status == store.RolloutQueuing && admin && aid == DefaultAttemptID {
		ro, err = h.startExternal(ctx, ro, statusData{Version: 1, Queued: true})
		var he *httpError
		if errors.As(err, &he) && he.Status == http.StatusConflict {
			// Claimed meanwhile (agl's controller, another replica): write
			// to the attempt that runs it.
			err = nil
		}
		if err != nil {
			return ro, store.Attempt{}, err
		}
		h.opt.Notify()
	}
	at, ok := attemptOf(ro, aid)
	if !ok {
		if len(ro.Attempts) == 0 {
			return ro, at, detailf(http.StatusConflict, "Rollout %s has not started: agl keeps events per attempt, and it has none yet", ro.ID)
		}
		return ro, at, detailf(http.StatusNotFound, "Attempt %s of rollout %s not found", aid, ro.ID)
	}
	return ro, at, nil
}

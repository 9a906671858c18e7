package al

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// AL's rollout states.
const (
	StateQueuing   = "queuing"
	StateRunning   = "running"
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
)

// RolloutConfig is AL's controller-facing rollout config.
type RolloutConfig = api.ALRolloutConfig

// LocalConfig is AL's RolloutLocalConfig.
type LocalConfig = api.ALLocalConfig

// K8sConfig is AL's RolloutK8sConfig.
type K8sConfig = api.ALK8sConfig

// Status is AL's RolloutLifecycleStatus.
type Status struct {
	State         string  `json:"state"`
	K8sJobName    *string `json:"k8s_job_name"`
	LastAttemptID *string `json:"last_attempt_id"`
	ErrorMessage  *string `json:"error_message"`
	Version       int     `json:"version"`
	CreatedAt     float64 `json:"created_at"`
	UpdatedAt     float64 `json:"updated_at"`
}

// Rollout is AL's Rollout.
type Rollout struct {
	RolloutID string          `json:"rollout_id"`
	Input     json.RawMessage `json:"input"`
	IsTrain   bool            `json:"is_train"`
	Config    RolloutConfig   `json:"config"`
	Metadata  json.RawMessage `json:"metadata"`
	Status    Status          `json:"status"`
}

// rolloutCreate is AL's RolloutCreate.
type rolloutCreate struct {
	Input     json.RawMessage `json:"input"`
	IsTrain   *bool           `json:"is_train"`
	Config    *configIn       `json:"config"`
	Metadata  json.RawMessage `json:"metadata"`
	RolloutID *string         `json:"rollout_id"`
}

// configIn is RolloutConfig as sent: a missing timeout_seconds is AL's
// default, 3600.
type configIn struct {
	TimeoutSeconds *int         `json:"timeout_seconds"`
	Local          *LocalConfig `json:"local"`
	K8s            *K8sConfig   `json:"k8s"`
}

// stored is what the reserved metadata key holds.
type stored struct {
	Config RolloutConfig `json:"config"`
}

func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// state maps agl's status onto AL's four.
func state(s store.RolloutStatus) string {
	switch s {
	case store.RolloutQueuing:
		return StateQueuing
	case store.RolloutRunning, store.RolloutRequeuing:
		return StateRunning
	case store.RolloutSucceeded:
		return StateSucceeded
	}
	return StateFailed
}

// statuses maps an AL state onto agl's.
func statuses(s string) ([]store.RolloutStatus, bool) {
	switch s {
	case StateQueuing:
		return []store.RolloutStatus{store.RolloutQueuing}, true
	case StateRunning:
		return []store.RolloutStatus{store.RolloutRunning, store.RolloutRequeuing}, true
	case StateSucceeded:
		return []store.RolloutStatus{store.RolloutSucceeded}, true
	case StateFailed:
		return []store.RolloutStatus{store.RolloutFailed, store.RolloutCancelled}, true
	}
	return nil, false
}

// toAL renders an agl rollout as AL's, with what agl keeps of it in
// events (x).
func toAL(ro store.Rollout, x extras) Rollout {
	out := Rollout{RolloutID: ro.ID, Input: ro.Task, IsTrain: ro.Mode != store.ModeVal}
	if len(out.Input) == 0 {
		out.Input = json.RawMessage("null")
	}
	cfg, ok := api.ALSpec(ro.Metadata)
	if !ok {
		cfg = RolloutConfig{TimeoutSeconds: int(ro.Config.TimeoutSeconds)}
	}
	out.Config = cfg
	out.Metadata = alMetadata(ro.Metadata)
	st := Status{State: state(ro.Status), Version: 1, CreatedAt: seconds(ro.CreatedAt), UpdatedAt: seconds(ro.UpdatedAt)}
	if sd := x.status; sd != nil {
		// An external controller's rollout: its PATCHes counted and kept.
		st.Version, st.K8sJobName, st.LastAttemptID, st.ErrorMessage = sd.Version, sd.K8sJobName, sd.LastAttemptID, sd.ErrorMessage
		if sd.Queued && st.State == StateRunning {
			st.State = StateQueuing
		}
	} else {
		if ro.NumAttempts > 0 {
			aid := DefaultAttemptID
			st.LastAttemptID = &aid
		}
		if ro.Status != store.RolloutQueuing {
			st.Version++
			if ro.Status.Terminal() && ro.NumAttempts > 0 {
				st.Version++
			}
		}
	}
	if ro.Error != "" {
		// A PATCH to failed cancels with its error_message as the reason.
		e := ro.Error
		if ro.Status == store.RolloutCancelled {
			e = strings.TrimPrefix(e, cancelledPrefix)
		}
		st.ErrorMessage = &e
	}
	out.Status = st
	return out
}

// alMetadata is AL's metadata: agl's without the reserved key, with AL's
// two named fields present.
func alMetadata(meta json.RawMessage) json.RawMessage {
	m := map[string]json.RawMessage{}
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &m); err != nil {
			m = map[string]json.RawMessage{}
		}
	}
	delete(m, MetadataKey)
	for _, k := range []string{"batch_idx", "sample_idx_in_batch"} {
		if _, ok := m[k]; !ok {
			m[k] = json.RawMessage("null")
		}
	}
	b, _ := json.Marshal(m)
	return b
}

// newRollout turns AL's RolloutCreate into agl's NewRollout.
func (h *Handler) newRollout(i int, c rolloutCreate) (store.NewRollout, error) {
	loc := func(f string) []any { return []any{"body", i, f} }
	if len(c.Input) == 0 {
		return store.NewRollout{}, validation(loc("input"), "Field required")
	}
	cfg := RolloutConfig{TimeoutSeconds: 3600}
	if c.Config != nil {
		cfg.Local, cfg.K8s = c.Config.Local, c.Config.K8s
		if c.Config.TimeoutSeconds != nil {
			cfg.TimeoutSeconds = *c.Config.TimeoutSeconds
		}
	}
	if cfg.Local != nil && cfg.Local.EnvMap == nil {
		cfg.Local.EnvMap = map[string]string{}
	}
	if cfg.TimeoutSeconds < 0 {
		return store.NewRollout{}, validation(loc("config"), "timeout_seconds must not be negative")
	}
	meta := map[string]json.RawMessage{}
	if len(c.Metadata) > 0 && !bytes.Equal(c.Metadata, []byte("null")) {
		if err := json.Unmarshal(c.Metadata, &meta); err != nil {
			return store.NewRollout{}, validation(loc("metadata"), "Input should be a valid dictionary")
		}
	}
	for _, k := range []string{"batch_idx", "sample_idx_in_batch"} {
		if v, ok := meta[k]; ok && !bytes.Equal(v, []byte("null")) {
			if _, err := strconv.ParseInt(string(v), 10, 64); err != nil {
				return store.NewRollout{}, validation(append(loc("metadata"), k), "Input should be a valid integer")
			}
		}
	}
	if _, ok := meta[MetadataKey]; ok {
		return store.NewRollout{}, validation(append(loc("metadata"), MetadataKey), "metadata key "+MetadataKey+" is reserved by agl")
	}
	sb, err := json.Marshal(stored{Config: cfg})
	if err != nil {
		return store.NewRollout{}, err
	}
	meta[MetadataKey] = sb
	mb, err := json.Marshal(meta)
	if err != nil {
		return store.NewRollout{}, err
	}
	mode := store.ModeTrain
	if c.IsTrain != nil && !*c.IsTrain {
		mode = store.ModeVal
	}
	id := ""
	if c.RolloutID != nil {
		id = *c.RolloutID
	} else {
		var b [16]byte
		rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	return store.NewRollout{ID: id, Task: c.Input, Mode: mode, Metadata: mb,
		Config: store.RolloutConfig{TimeoutSeconds: float64(cfg.TimeoutSeconds), MaxAttempts: h.cfg.MaxAttempts}}, nil
}

func (h *Handler) createRollouts(w http.ResponseWriter, r *http.Request) error {
	var body []rolloutCreate
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	nrs := make([]store.NewRollout, len(body))
	for i, c := range body {
		nr, err := h.newRollout(i, c)
		if err != nil {
			return err
		}
		nrs[i] = nr
	}
	out := []Rollout{}
	if len(nrs) > 0 {
		rs, err := h.opt.Store.CreateRollouts(r.Context(), nrs)
		if err != nil {
			return err
		}
		for _, ro := range rs {
			x, err := h.extrasOf(r.Context(), ro, true)
			if err != nil {
				return err
			}
			out = append(out, toAL(ro, x))
		}
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// deletedReason marks a rollout cancelled by DELETE; deletedEvent marks a
// rollout with an attempt deleted after it ended.
const (
	deletedReason = "deleted through Agent Lightning's API"
	deletedEvent  = "al.deleted"
	// cancelledPrefix starts the error of a rollout cancelled with a reason.
	cancelledPrefix = "cancelled: "
)

// visible returns the rollout and what agl keeps of it in events (its
// status fields if withStatus), unless it was (soft-)deleted.
func (h *Handler) visible(ctx context.Context, id string, withStatus bool) (store.Rollout, extras, error) {
	ro, err := h.opt.Store.GetRollout(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return ro, extras{}, detailf(http.StatusNotFound, "Rollout not found: %s", id)
		}
		return ro, extras{}, err
	}
	x, err := h.extrasOf(ctx, ro, withStatus)
	if err != nil {
		return ro, x, err
	}
	if x.deleted {
		return ro, x, detailf(http.StatusNotFound, "Rollout not found: %s", id)
	}
	return ro, x, nil
}

func (h *Handler) getRollout(w http.ResponseWriter, r *http.Request) error {
	ro, x, err := h.visible(r.Context(), r.PathValue("id"), true)
	if err != nil {
		return err
	}
	attempts := []string{}
	if len(ro.Attempts) > 0 {
		attempts = append(attempts, DefaultAttemptID)
	}
	writeJSON(w, http.StatusOK, struct {
		Rollout  Rollout  `json:"rollout"`
		Attempts []string `json:"attempts"`
	}{toAL(ro, x), attempts})
	return nil
}

func (h *Handler) listRollouts(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	states := q["state_in"]
	if len(states) == 0 {
		return validation([]any{"query", "state_in"}, "Field required")
	}
	var want []store.RolloutStatus
	wantState := map[string]bool{}
	for i, s := range states {
		st, ok := statuses(s)
		if !ok {
			return validation([]any{"query", "state_in", i}, "Input should be 'queuing', 'running', 'succeeded' or 'failed'")
		}
		want = append(want, st...)
		wantState[s] = true
	}
	if wantState[StateQueuing] && !wantState[StateRunning] {
		// A rollout an admin's write started still shows queuing
		// (statusData.Queued): read the running ones too, and keep those.
		want = append(want, store.RolloutRunning)
	}
	limit := 500
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return validation([]any{"query", "limit"}, "Input should be a valid integer, unable to parse string as an integer")
		}
		limit = n
	}
	out := []Rollout{}
	cursor := int64(0)
	for len(out) < limit {
		rs, next, err := h.opt.Store.ListRollouts(r.Context(), store.RolloutFilter{Status: want, Cursor: cursor, Limit: min(limit-len(out), 500)})
		if err != nil {
			return err
		}
		for _, ro := range rs {
			x, err := h.extrasOf(r.Context(), ro, true)
			if err != nil {
				return err
			}
			if x.deleted {
				continue
			}
			a := toAL(ro, x)
			if !wantState[a.Status.State] {
				continue
			}
			if x.status != nil && ro.Status == store.RolloutRunning {
				// The external controller's poll: its attempt is alive.
				h.beat(r.Context(), ro.ID, x.status.AttemptID)
			}
			out = append(out, a)
		}
		if next == 0 || len(rs) == 0 {
			break
		}
		cursor = next
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// terminalItem is AL's TerminalRolloutItem.
type terminalItem struct {
	RolloutID string `json:"rollout_id"`
	State     string `json:"state"`
	DataID    string `json:"data_id"`
	IsTrain   bool   `json:"is_train"`
}

func dataID(input json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(input, &m) != nil {
		return ""
	}
	for _, k := range []string{"data_id", "instance_id"} {
		if v, ok := m[k]; ok && truthy(v) {
			if s, ok := v.(string); ok {
				return s
			}
			b, _ := json.Marshal(v)
			return pyStr(v, b)
		}
	}
	return ""
}

// truthy is Python's bool() of a decoded JSON value.
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// pyStr is Python's str() of a decoded JSON value, for the common cases.
func pyStr(v any, b []byte) string {
	switch x := v.(type) {
	case bool:
		if x {
			return "True"
		}
		return "False"
	case float64:
		if x == float64(int64(x)) {
			return strconv.FormatInt(int64(x), 10)
		}
	}
	return string(b)
}

func (h *Handler) terminal(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	after, limit := int64(0), 1000
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return validation([]any{"query", "after"}, "Input should be a valid integer, unable to parse string as an integer")
		}
		after = max(n, 0)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return validation([]any{"query", "limit"}, "Input should be a valid integer, unable to parse string as an integer")
		}
		limit = max(n, 1)
	}
	rs, err := h.opt.Store.Terminal(r.Context(), after, limit)
	if err != nil {
		return err
	}
	counts, err := h.opt.Store.CountRollouts(r.Context())
	if err != nil {
		return err
	}
	items := []terminalItem{}
	next := after
	for _, ro := range rs {
		next = max(next, ro.TerminalSeq)
		x, err := h.extrasOf(r.Context(), ro, false)
		if err != nil {
			return err
		}
		if x.deleted {
			continue
		}
		items = append(items, terminalItem{RolloutID: ro.ID, State: state(ro.Status), DataID: dataID(ro.Task), IsTrain: ro.Mode != store.ModeVal})
	}
	total := counts[store.RolloutSucceeded] + counts[store.RolloutFailed] + counts[store.RolloutCancelled]
	writeJSON(w, http.StatusOK, struct {
		Items         []terminalItem `json:"items"`
		NextAfter     int64          `json:"next_after"`
		TotalTerminal int64          `json:"total_terminal"`
	}{items, next, total})
	return nil
}

// statusPatch is AL's RolloutStatusPatch (extra fields forbidden).
type statusPatch struct {
	State         *string `json:"state"`
	K8sJobName    *string `json:"k8s_job_name"`
	LastAttemptID *string `json:"last_attempt_id"`
	ErrorMessage  *string `json:"error_message"`
}

// validTransitions is AL's VALID_TRANSITIONS.
var validTransitions = map[string][]string{
	StateQueuing: {StateRunning, StateFailed},
	StateRunning: {StateSucceeded, StateFailed},
}

// patchRollout applies AL's lifecycle PATCH to agl's rollout.
// queuing → running starts attempt "0" for an external controller (a
// store claim naming the rollout: 409 when agl's controller took it
// first); failed cancels the rollout (error_message is the reason);
// running → succeeded completes the external attempt. An external
// controller's k8s_job_name and last_attempt_id are kept with its
// attempt. A rollout agl's controller runs is its own: PATCHes that would
// end it or write AL's fields on it are refused (409).
func (h *Handler) patchRollout(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Status json.RawMessage `json:"status"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	var p statusPatch
	if len(body.Status) > 0 && !bytes.Equal(body.Status, []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(body.Status))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return validation([]any{"body", "status"}, "Extra inputs are not permitted or invalid field: "+err.Error())
		}
	}
	ctx := r.Context()
	ro, x, err := h.visible(ctx, r.PathValue("id"), true)
	if err != nil {
		return err
	}
	if p.State == nil && p.K8sJobName == nil && p.LastAttemptID == nil && p.ErrorMessage == nil {
		writeJSON(w, http.StatusOK, toAL(ro, x))
		return nil
	}
	from := toAL(ro, x).Status.State
	to := from
	if p.State != nil {
		to = *p.State
		if _, ok := statuses(to); !ok {
			return validation([]any{"body", "status", "state"}, "Input should be 'queuing', 'running', 'succeeded' or 'failed'")
		}
		ok := false
		for _, s := range validTransitions[from] {
			ok = ok || s == to
		}
		if !ok {
			return detailf(http.StatusConflict, "Rollout %s: cannot transition %s -> %s", ro.ID, from, to)
		}
	}
	// The status AL's fields go to: the previous one with this PATCH's.
	sd := statusData{Version: toAL(ro, x).Status.Version + 1}
	if x.status != nil {
		sd.AttemptID, sd.K8sJobName, sd.LastAttemptID, sd.ErrorMessage = x.status.AttemptID, x.status.K8sJobName, x.status.LastAttemptID, x.status.ErrorMessage
	}
	if p.K8sJobName != nil {
		sd.K8sJobName = p.K8sJobName
	}
	if p.LastAttemptID != nil {
		sd.LastAttemptID = p.LastAttemptID
	}
	if p.ErrorMessage != nil {
		sd.ErrorMessage = p.ErrorMessage
	}
	if from == StateQueuing && to == StateRunning && x.status != nil && x.status.Queued {
		// Started by an admin's write (the agent called before this
		// PATCH): the attempt runs already; AL's view now says running.
		if err := h.appendStatus(ctx, ro.ID, x.status.AttemptID, sd); err != nil {
			return err
		}
		h.beat(ctx, ro.ID, x.status.AttemptID)
		h.opt.Notify()
		x.status = &sd
		writeJSON(w, http.StatusOK, toAL(ro, x))
		return nil
	}
	if from == StateQueuing && to == StateRunning {
		if ro, err = h.startExternal(ctx, ro, sd); err != nil {
			return err
		}
		h.opt.Notify()
		x.status = &sd
		writeJSON(w, http.StatusOK, toAL(ro, x))
		return nil
	}
	at, running := attemptOf(ro, DefaultAttemptID)
	running = running && at.Status == store.AttemptRunning && !ro.Status.Terminal()
	if running && at.WorkerID != ExternalWorker {
		return detailf(http.StatusConflict, "Rollout %s is run by agl's controller (attempt %d): only the controller that started a rollout ends it", ro.ID, at.Number)
	}
	keep := p.K8sJobName != nil || p.LastAttemptID != nil
	if keep && !running {
		return detailf(http.StatusConflict, "Rollout %s is %s: agl keeps k8s_job_name and last_attempt_id only while an external controller runs it", ro.ID, from)
	}
	if running {
		if err := h.appendStatus(ctx, ro.ID, at.ID, sd); err != nil {
			return err
		}
		x.status = &sd
		if to != StateRunning {
			h.forgetExternal(ro.ID, at.ID)
		}
	}
	switch {
	case to == StateFailed && from != StateFailed:
		reason := "failed through Agent Lightning's API"
		if p.ErrorMessage != nil && *p.ErrorMessage != "" {
			reason = *p.ErrorMessage
		}
		ro, err = h.opt.Store.CancelRollout(ctx, ro.ID, reason)
	case to == StateSucceeded && from == StateRunning:
		if !running {
			return detailf(http.StatusConflict, "Rollout %s: no running attempt to complete", ro.ID)
		}
		_, err = h.opt.Store.CompleteAttempt(ctx, ro.ID, at.ID, store.AttemptSucceeded, "")
		if err == nil {
			ro, err = h.opt.Store.GetRollout(ctx, ro.ID)
		}
	case p.ErrorMessage != nil && !running:
		return detailf(http.StatusConflict, "Rollout %s is %s: agl keeps error_message only as the reason of a PATCH to failed", ro.ID, from)
	}
	if err != nil {
		return err
	}
	h.opt.Notify()
	writeJSON(w, http.StatusOK, toAL(ro, x))
	return nil
}

// deleteRollout is AL's DELETE: 204 whether or not the rollout exists. agl
// keeps the data (AL stops seeing the rollout; a live one is cancelled)
// unless Config.Purge or ?purge=true; a terminal rollout that never ran (no
// attempt, no events) is removed.
func (h *Handler) deleteRollout(w http.ResponseWriter, r *http.Request) error {
	ctx, id := r.Context(), r.PathValue("id")
	purge := h.cfg.Purge
	if v := r.URL.Query().Get("purge"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return validation([]any{"query", "purge"}, "Input should be a valid boolean")
		}
		purge = b
	}
	ro, err := h.opt.Store.GetRollout(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if err != nil {
		return err
	}
	if !ro.Status.Terminal() {
		if ro, err = h.opt.Store.CancelRollout(ctx, id, deletedReason); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
		h.forgetExternal(id, "")
		h.opt.Notify()
	}
	switch {
	case purge:
		if h.opt.Late == nil {
			return detailf(http.StatusNotImplemented, "this store cannot purge rollouts")
		}
		if err := h.opt.Late.PurgeRollout(ctx, id); err != nil {
			return err
		}
	case ro.Error != cancelledPrefix+deletedReason || ro.Status != store.RolloutCancelled:
		if ro, err = h.opt.Store.GetRollout(ctx, id); err != nil {
			return err
		}
		if x, err := h.extrasOf(ctx, ro, false); err != nil || x.deleted {
			if err == nil {
				w.WriteHeader(http.StatusNoContent)
			}
			return err
		}
		if h.opt.Late == nil {
			return detailf(http.StatusNotImplemented, "this store cannot mark rollouts deleted")
		}
		at, ok := attemptOf(ro, DefaultAttemptID)
		if !ok {
			// It never ran (failed through PATCH while queuing): there is
			// nothing to keep but its input.
			if err := h.opt.Late.PurgeRollout(ctx, id); err != nil {
				return err
			}
			break
		}
		if _, err := h.opt.Late.AppendLateEvents(ctx, id, at.ID, []store.NewEvent{{Type: deletedEvent, Data: json.RawMessage(`{}`)}}); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

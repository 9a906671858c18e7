package dashboard

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/store"
)

// RolloutRow is one line of the rollouts list: a rollout without its bulky
// fields (the task is a short preview).
type RolloutRow struct {
	ID          string              `json:"id"`
	Seq         int64               `json:"seq"`
	GroupID     string              `json:"group_id,omitempty"`
	Mode        store.Mode          `json:"mode"`
	Status      store.RolloutStatus `json:"status"`
	Step        *int64              `json:"step,omitempty"`
	Reward      *float64            `json:"reward,omitempty"`
	NumAttempts int                 `json:"num_attempts"`
	Error       string              `json:"error,omitempty"`
	Task        string              `json:"task"`
	CreatedAt   time.Time           `json:"created_at"`
	UpdatedAt   time.Time           `json:"updated_at"`
}

// RolloutsPage answers GET /api/dashboard/rollouts.
type RolloutsPage struct {
	Rollouts []RolloutRow `json:"rollouts"`
	// NextCursor continues the listing (pass it as cursor); 0 at the end.
	NextCursor int64 `json:"next_cursor,omitempty"`
}

// MaxPage bounds the rollouts list page size (default 50).
const MaxPage = 200

// preview shortens compact JSON to at most n runes.
func preview(raw json.RawMessage, n int) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		b.Reset()
		b.Write(raw)
	}
	s := b.String()
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// parseFilter reads the list filters: status (repeated or comma-separated),
// mode, group, step, min_reward, max_reward, cursor, limit, order (desc by
// default: newest first).
func parseFilter(r *http.Request) (store.RolloutFilter, error) {
	q := r.URL.Query()
	f := store.RolloutFilter{GroupID: strings.TrimSpace(q.Get("group")), Mode: store.Mode(q.Get("mode")), Desc: true, Limit: 50}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		f.Desc = false
	default:
		return f, badRequest("order %q is not asc or desc", q.Get("order"))
	}
	if f.Mode != "" && !f.Mode.Valid() {
		return f, badRequest("mode %q is not train or val", f.Mode)
	}
	for _, v := range q["status"] {
		for _, st := range strings.Split(v, ",") {
			if st == "" {
				continue
			}
			rs := store.RolloutStatus(st)
			if !rs.Valid() {
				return f, badRequest("status %q is not a rollout status", st)
			}
			f.Status = append(f.Status, rs)
		}
	}
	ints := []struct {
		name string
		set  func(int64)
	}{
		{"cursor", func(n int64) { f.Cursor = n }},
		{"limit", func(n int64) { f.Limit = int(min(max(n, 1), MaxPage)) }},
		{"step", func(n int64) { f.Step = &n }},
	}
	for _, p := range ints {
		if v := strings.TrimSpace(q.Get(p.name)); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return f, badRequest("%s %q is not a non-negative integer", p.name, v)
			}
			p.set(n)
		}
	}
	for _, b := range []struct {
		name string
		dst  **float64
	}{{"min_reward", &f.MinReward}, {"max_reward", &f.MaxReward}} {
		if v := strings.TrimSpace(q.Get(b.name)); v != "" {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return f, badRequest("%s %q is not a number", b.name, v)
			}
			*b.dst = &x
		}
	}
	return f, nil
}

func (d *Dashboard) rollouts(w http.ResponseWriter, r *http.Request) error {
	f, err := parseFilter(r)
	if err != nil {
		return err
	}
	rs, next, err := d.opt.Store.ListRollouts(r.Context(), f)
	if err != nil {
		return err
	}
	page := RolloutsPage{Rollouts: make([]RolloutRow, len(rs)), NextCursor: next}
	for i, ro := range rs {
		page.Rollouts[i] = RolloutRow{ID: ro.ID, Seq: ro.Seq, GroupID: ro.GroupID, Mode: ro.Mode, Status: ro.Status,
			Step: ro.Step, Reward: ro.Reward, NumAttempts: ro.NumAttempts, Error: ro.Error, Task: preview(ro.Task, 160),
			CreatedAt: ro.CreatedAt, UpdatedAt: ro.UpdatedAt}
	}
	api.WriteJSON(w, http.StatusOK, page)
	return nil
}

// RolloutView answers GET /api/dashboard/rollouts/{id}: the rollout with
// its attempts, and one attempt's conversation (?attempt=, default the
// last) with its other events.
type RolloutView struct {
	Rollout store.Rollout `json:"rollout"`
	// Attempt is the attempt shown.
	Attempt string `json:"attempt"`
	Calls   []Call `json:"calls"`
	// Events are the attempt's events other than model calls (rewards,
	// logs, spans, custom), with their data shortened.
	Events []EventRow `json:"events"`
}

// EventRow is a non-model-call event, its data shortened for display.
type EventRow struct {
	Seq  int64     `json:"seq"`
	Type string    `json:"type"`
	Time time.Time `json:"time"`
	Data string    `json:"data"`
}

func (d *Dashboard) attemptOf(r *http.Request, ro store.Rollout) (string, error) {
	aid := r.URL.Query().Get("attempt")
	if aid == "" {
		return samples.FinalAttempt(ro, nil), nil
	}
	for _, a := range ro.Attempts {
		if a.ID == aid {
			return aid, nil
		}
	}
	return "", api.Errorf(http.StatusNotFound, "not_found", "rollout %s has no attempt %s", ro.ID, aid)
}

func (d *Dashboard) rollout(w http.ResponseWriter, r *http.Request) error {
	ro, err := d.opt.Store.GetRollout(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	v := RolloutView{Rollout: ro, Calls: []Call{}, Events: []EventRow{}}
	if v.Attempt, err = d.attemptOf(r, ro); err != nil {
		return err
	}
	if v.Attempt != "" {
		evs, err := d.opt.Store.ListEvents(r.Context(), store.EventFilter{RolloutID: ro.ID, AttemptID: v.Attempt})
		if err != nil {
			return err
		}
		var calls []store.Event
		for _, e := range evs {
			if e.Type == store.EventModelRequest {
				calls = append(calls, e)
				continue
			}
			v.Events = append(v.Events, EventRow{Seq: e.Seq, Type: e.Type, Time: e.Time, Data: preview(e.Data, 2000)})
		}
		v.Calls = Conversation(calls)
	}
	api.WriteJSON(w, http.StatusOK, v)
	return nil
}

// StateView answers GET /api/dashboard/state, which every open page polls:
// the gateway's state and rollout counts.
type StateView struct {
	Gateway api.GatewayStatus `json:"gateway"`
	Time    time.Time         `json:"time"`
}

func (d *Dashboard) state(w http.ResponseWriter, r *http.Request) error {
	v := StateView{Time: time.Now().UTC()}
	var err error
	if d.opt.Status != nil {
		v.Gateway, err = d.opt.Status(r.Context())
	} else {
		v.Gateway.Counts, err = d.opt.Store.CountRollouts(r.Context())
	}
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, v)
	return nil
}

// WorkersView answers GET /api/dashboard/workers?window=10m: the workers
// with an attempt running now or started within the window.
type WorkersView struct {
	Workers []store.Worker `json:"workers"`
	Window  string         `json:"window"`
	Time    time.Time      `json:"time"`
}

// MaxWorkersWindow bounds the workers view's window.
const MaxWorkersWindow = 24 * time.Hour

func (d *Dashboard) workers(w http.ResponseWriter, r *http.Request) error {
	win := d.opt.WorkersWindow
	if v := r.URL.Query().Get("window"); v != "" {
		x, err := time.ParseDuration(v)
		if err != nil || x <= 0 || x > MaxWorkersWindow {
			return badRequest("window %q is not a duration between 0 and %s", v, MaxWorkersWindow)
		}
		win = x
	}
	now := time.Now().UTC()
	v := WorkersView{Window: win.String(), Time: now}
	var err error
	if v.Workers, err = d.opt.Store.Workers(r.Context(), now.Add(-win)); err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, v)
	return nil
}

// TrainView answers GET /api/dashboard/train: the recorded runs, the
// steps of one (?run=, default the one reported last), and model versions.
type TrainView struct {
	Runs   []string          `json:"runs"`
	Run    string            `json:"run"`
	Steps  []store.TrainStep `json:"steps"`
	Models []store.Model     `json:"models"`
}

func (d *Dashboard) train(w http.ResponseWriter, r *http.Request) error {
	all, err := d.opt.Store.ListTrainSteps(r.Context(), "")
	if err != nil {
		return err
	}
	v := TrainView{Runs: []string{}, Steps: []store.TrainStep{}, Run: r.URL.Query().Get("run")}
	last := map[string]time.Time{}
	for _, s := range all {
		if t, ok := last[s.Run]; !ok || s.Time.After(t) {
			last[s.Run] = s.Time
		}
	}
	for run := range last {
		v.Runs = append(v.Runs, run)
	}
	sort.Slice(v.Runs, func(i, j int) bool { return last[v.Runs[i]].After(last[v.Runs[j]]) })
	if v.Run == "" && len(v.Runs) > 0 {
		v.Run = v.Runs[0]
	}
	for _, s := range all {
		if s.Run == v.Run {
			v.Steps = append(v.Steps, withoutAdvantages(s))
		}
	}
	if v.Models, err = d.opt.Store.ListModels(r.Context(), ""); err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, v)
	return nil
}

// withoutAdvantages drops a step's per-call advantages (the per-token view
// shows them) from what the charts get.
func withoutAdvantages(s store.TrainStep) store.TrainStep {
	if !bytes.Contains(s.Metrics, []byte(`"advantages"`)) {
		return s
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(s.Metrics, &m) != nil {
		return s
	}
	delete(m, "advantages")
	if b, err := json.Marshal(m); err == nil {
		s.Metrics = b
	}
	return s
}

package al

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/aglrl/agl/store"
)

// ExternalWorker is the worker id of an attempt an external controller
// started: AL's LocalReconciler or K8s reconciler with PATCH
// {"status":{"state":"running"}}, or an admin's first write (an event or an
// LLM call) to attempt "0" of a queuing rollout, which AL accepts before
// the reconciler's PATCH (a K8s Job's agent may call before the next
// reconcile tick). The start is a store claim naming the rollout, so agl's
// controller and an external one never both start the same rollout, and
// the terminal PATCHes of an external controller are refused on a rollout
// agl's controller runs.
const ExternalWorker = "al-external"

// statusEvent is the event, on an external attempt, that holds AL's status
// fields agl's rollout has no column for; the latest one counts.
const statusEvent = "al.status"

// statusData is a statusEvent's data.
type statusData struct {
	// AttemptID is the agl attempt the external controller runs.
	AttemptID     string  `json:"attempt_id"`
	K8sJobName    *string `json:"k8s_job_name,omitempty"`
	LastAttemptID *string `json:"last_attempt_id,omitempty"`
	ErrorMessage  *string `json:"error_message,omitempty"`
	// Version is AL's status.version: 1 at creation, one more per PATCH
	// that changed something.
	Version int `json:"version"`
	// Queued: the attempt was started by an admin's write, not by a PATCH
	// to running. AL still shows such a rollout queuing (it accepts the
	// write and changes no state), so its reconciler's PATCH to running
	// is still valid and only clears this.
	Queued bool `json:"queued,omitempty"`
}

// extras is what agl keeps of an AL rollout in its events.
type extras struct {
	deleted bool
	status  *statusData
}

// extrasOf reads the latest status or deletion event of a rollout (one
// query; a rollout without attempts has none). Without withStatus only
// whether it was deleted counts, which a live rollout answers without a
// query: the agent route and event posts skip the query (it walks the
// rollout's events back to the latest match).
func (h *Handler) extrasOf(ctx context.Context, ro store.Rollout, withStatus bool) (extras, error) {
	var x extras
	if ro.Status == store.RolloutCancelled && ro.Error == cancelledPrefix+deletedReason {
		x.deleted = true
		return x, nil
	}
	if ro.NumAttempts == 0 || (!withStatus && !ro.Status.Terminal()) {
		return x, nil
	}
	evs, err := h.opt.Store.ListEvents(ctx, store.EventFilter{RolloutID: ro.ID, Types: []string{deletedEvent, statusEvent}, Desc: true, Limit: 1})
	if err != nil || len(evs) == 0 {
		return x, err
	}
	switch evs[0].Type {
	case deletedEvent:
		x.deleted = true
	case statusEvent:
		var sd statusData
		if json.Unmarshal(evs[0].Data, &sd) == nil {
			x.status = &sd
		}
	}
	return x, nil
}

// external reports whether an external controller runs the rollout's
// latest attempt.
func external(ro store.Rollout) bool {
	at, ok := attemptOf(ro, DefaultAttemptID)
	return ok && at.WorkerID == ExternalWorker
}

// startExternal starts attempt "0" of a queuing rollout for an external
// controller and records its status (version, AL's fields). A rollout no
// longer queued (agl's controller, or another replica's request, took it
// meanwhile) is a 409 naming the transition.
func (h *Handler) startExternal(ctx context.Context, ro store.Rollout, sd statusData) (store.Rollout, error) {
	cl, err := h.opt.Store.Claim(ctx, store.ClaimRequest{WorkerID: ExternalWorker, RolloutID: ro.ID})
	if errors.Is(err, store.ErrNoneQueued) {
		cur, gerr := h.opt.Store.GetRollout(ctx, ro.ID)
		if gerr != nil {
			return ro, gerr
		}
		return cur, detailf(http.StatusConflict, "Rollout %s: cannot transition %s -> %s", ro.ID, state(cur.Status), StateRunning)
	}
	if err != nil {
		return ro, err
	}
	sd.AttemptID = cl.Attempt.ID
	if err := h.appendStatus(ctx, ro.ID, cl.Attempt.ID, sd); err != nil {
		return ro, err
	}
	h.noteBeat(ro.ID)
	return h.opt.Store.GetRollout(ctx, ro.ID)
}

func (h *Handler) appendStatus(ctx context.Context, rid, aid string, sd statusData) error {
	b, err := json.Marshal(sd)
	if err != nil {
		return err
	}
	_, err = h.opt.Store.AppendEvents(ctx, rid, aid, []store.NewEvent{{Type: statusEvent, Data: b}})
	return err
}

// beatEvery is how often a listing that shows an externally run rollout
// refreshes its attempt's heartbeat. AL has no heartbeat: an external
// controller is alive while it polls (GET /api/rollouts every
// poll_interval, 5 s for AL's K8s reconciler, 10 s for its local one), so
// agl's reaper marks an external attempt unresponsive after the rollout's
// unresponsive_seconds without a poll, event or call, and times it out
// after config.timeout_seconds as AL's reconcilers kill it.
const beatEvery = 5 * time.Second

// noteBeat records that rollout rid's external attempt was just started
// or beaten.
func (h *Handler) noteBeat(rid string) {
	h.beatMu.Lock()
	if len(h.beats) >= 1<<16 {
		clear(h.beats)
	}
	h.beats[rid] = time.Now()
	h.beatMu.Unlock()
}

// beat refreshes the heartbeat of an external attempt at most every
// beatEvery per rollout and gateway process.
func (h *Handler) beat(ctx context.Context, rid, aid string) {
	h.beatMu.Lock()
	last, ok := h.beats[rid]
	h.beatMu.Unlock()
	if ok && time.Since(last) < beatEvery {
		return
	}
	h.noteBeat(rid)
	if _, err := h.opt.Store.Heartbeat(ctx, rid, aid); err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		h.log.Warn("al: heartbeat of an external attempt", "rollout", rid, "err", err)
	}
}

// cacheExternal remembers for authTTL that AL's attempt aid of rollout rid
// is the external attempt at, running: the server key's next calls skip
// the store reads (the proxy checks the attempt again, and a call after it
// ended gets its refusal; the heartbeat comes from the polls meanwhile).
func (h *Handler) cacheExternal(rid, aid, at string) {
	h.extMu.Lock()
	if len(h.ext) >= 1<<16 {
		clear(h.ext)
	}
	h.ext[[2]string{rid, aid}] = authEntry{attempt: at, until: time.Now().Add(authTTL)}
	h.extMu.Unlock()
}

// cachedExternal returns the external attempt cacheExternal remembered.
func (h *Handler) cachedExternal(rid, aid string) (string, bool) {
	h.extMu.Lock()
	e, ok := h.ext[[2]string{rid, aid}]
	h.extMu.Unlock()
	if !ok || time.Now().After(e.until) {
		return "", false
	}
	return e.attempt, true
}

// forgetExternal drops rollout rid's cached external attempt (it ended
// through this gateway process: a PATCH or a DELETE; at may be "").
func (h *Handler) forgetExternal(rid, at string) {
	h.extMu.Lock()
	delete(h.ext, [2]string{rid, DefaultAttemptID})
	delete(h.ext, [2]string{rid, at})
	h.extMu.Unlock()
}

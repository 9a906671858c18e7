package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

// maxHarnessEvents bounds one POST /events.
const maxHarnessEvents = store.MaxEventsPerRequest

// serveEvents appends harness-emitted events: one {"type","data","time"}
// object, an array of them, or {"events":[…]}, checked by api.CheckEvents:
// a scoped key may not forge gateway-owned events (model_request, span) or
// a reward's source (403), and rewards must be finite numbers within the
// configured bound (400).
func (p *Proxy) serveEvents(w http.ResponseWriter, r *http.Request, t Target) {
	if r.Method != http.MethodPost {
		writeError(w, styleOpenAI, &apiError{Status: http.StatusMethodNotAllowed, Message: "use POST"})
		return
	}
	if _, aerr := p.authorize(r.Context(), r, t, true); aerr != nil {
		writeError(w, styleOpenAI, aerr)
		return
	}
	body, aerr := p.readBody(w, r)
	if aerr != nil {
		writeError(w, styleOpenAI, aerr)
		return
	}
	evs, aerr := parseHarnessEvents(body, r.Context().Value(trustedKey{}) == nil, p.cfg.MaxAbsReward)
	if aerr != nil {
		writeError(w, styleOpenAI, aerr)
		return
	}
	stored, err := p.st.AppendEvents(r.Context(), t.RolloutID, t.AttemptID, evs)
	if err != nil {
		st := http.StatusInternalServerError
		switch {
		case errors.Is(err, store.ErrConflict):
			st = http.StatusConflict
		case errors.Is(err, store.ErrInvalid):
			st = http.StatusBadRequest
		case errors.Is(err, store.ErrNotFound):
			st = http.StatusNotFound
		}
		writeError(w, styleOpenAI, &apiError{Status: st, Message: "append events: " + err.Error()})
		return
	}
	b, err := json.Marshal(struct {
		Events []store.Event `json:"events"`
	}{stored})
	if err != nil {
		writeError(w, styleOpenAI, &apiError{Status: http.StatusInternalServerError, Message: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// parseHarnessEvents decodes and checks a POST /events body; harness is
// true for a caller with a scoped key (false behind ServeTrusted).
func parseHarnessEvents(body []byte, harness bool, maxAbsReward float64) ([]store.NewEvent, *apiError) {
	var evs []store.NewEvent
	trim := strings.TrimSpace(string(body))
	switch {
	case strings.HasPrefix(trim, "["):
		if err := json.Unmarshal(body, &evs); err != nil {
			return nil, badRequest("", "malformed JSON: %v", err)
		}
	case strings.HasPrefix(trim, "{"):
		var one struct {
			store.NewEvent
			Events []store.NewEvent `json:"events"`
		}
		if err := json.Unmarshal(body, &one); err != nil {
			return nil, badRequest("", "malformed JSON: %v", err)
		}
		if one.Events != nil {
			evs = one.Events
		} else {
			evs = []store.NewEvent{one.NewEvent}
		}
	default:
		return nil, badRequest("", "malformed JSON: expected an event object or an array of events")
	}
	if len(evs) == 0 {
		return nil, badRequest("events", "no events given")
	}
	if len(evs) > maxHarnessEvents {
		return nil, badRequest("events", "at most %d events per request", maxHarnessEvents)
	}
	if fe := api.CheckEvents(evs, harness, maxAbsReward); fe != nil {
		return nil, &apiError{Status: fe.Status, Message: fe.Error(), Param: fe.Field}
	}
	for i, e := range evs {
		if len(e.Data) == 0 {
			evs[i].Data = json.RawMessage("null")
		}
	}
	return evs, nil
}

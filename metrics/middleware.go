package metrics

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aglrl/agl/store"
)

// RouteClass names the kind of a gateway request for metric labels, keeping
// ids out of label values:
//
//	/r/{rollout}/{attempt}/v1/chat/completions → "chat.completions"
//	/r/…/v1/completions → "completions", /r/…/v1/responses → "responses",
//	/r/…/v1/messages → "messages", /r/…/v1/messages/count_tokens → "count_tokens",
//	/r/…/v1/models → "models", /r/…/v1/traces and /v1/traces → "otlp.traces",
//	other /r/… → "llm.other"; /api/claim → "api.claim",
//	/api/rollouts/{id}/attempts/{aid}/events → "api.events" (and so on for
//	/api/…); /metrics → "metrics"; anything else → "other".
func RouteClass(path string) string {
	switch {
	case path == "/metrics":
		return "metrics"
	case path == "/v1/traces":
		return "otlp.traces"
	case strings.HasPrefix(path, "/r/"):
		return llmClass(path)
	case path == "/api" || strings.HasPrefix(path, "/api/"):
		return apiClass(path)
	}
	return "other"
}

func llmClass(path string) string {
	i := strings.Index(path, "/v1/")
	if i < 0 {
		return "llm.other"
	}
	switch strings.TrimSuffix(path[i+len("/v1/"):], "/") {
	case "chat/completions":
		return "chat.completions"
	case "completions":
		return "completions"
	case "responses":
		return "responses"
	case "messages":
		return "messages"
	case "messages/count_tokens":
		return "count_tokens"
	case "models":
		return "models"
	case "traces":
		return "otlp.traces"
	}
	return "llm.other"
}

// apiClass maps /api/… to a small fixed set so ids never become labels.
func apiClass(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/") // "api", …
	if len(parts) < 2 {
		return "api.other"
	}
	switch parts[1] {
	case "health", "claim", "terminal", "models":
		return "api." + parts[1]
	case "gateway":
		return "api.gateway"
	case "rollouts":
		switch {
		case len(parts) <= 3:
			return "api.rollouts"
		case len(parts) == 4 && parts[3] == "cancel":
			return "api.cancel"
		case len(parts) == 4 && parts[3] == "events":
			return "api.events"
		case len(parts) == 6 && parts[3] == "attempts":
			switch parts[5] {
			case "heartbeat", "complete", "events":
				return "api." + parts[5]
			}
		}
	}
	return "api.other"
}

// Middleware counts requests through next by route class and status, with
// their latency and how many are in flight. Streaming responses keep
// working: the wrapper passes Flush and http.ResponseController through.
func (m *Metrics) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := RouteClass(r.URL.Path)
		g := m.httpInFlight.WithLabelValues(route)
		g.Inc()
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			g.Dec()
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			m.httpRequests.WithLabelValues(route, strconv.Itoa(status)).Inc()
			m.httpDuration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}()
		next.ServeHTTP(sw, r)
	})
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // 1xx are informational
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes through so server-sent events stream.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var _ store.Observer = (*Metrics)(nil)

// EventsStored implements store.Observer: events stored by type and,
// with Options.CallsFromEvents, the model calls that "model_request"
// events describe.
func (m *Metrics) EventsStored(evs []store.NewEvent) {
	byType := map[string]int{}
	for _, e := range evs {
		byType[e.Type]++
	}
	for t, n := range byType {
		m.ObserveEvents(t, n)
	}
	if m.callsFromEvents && byType[store.EventModelRequest] > 0 {
		for _, e := range evs {
			if e.Type == store.EventModelRequest {
				m.observeCallEvent(summaryData(e), e.Data)
			}
		}
	}
}

// summaryData returns the JSON of a model_request event for its
// callSummary: with the layout its writer gave, the event without its
// token ids and request (each replaced by null), which the summary does
// not read and which make up nearly all of a long rollout's event.
func summaryData(e store.NewEvent) []byte {
	l := e.Layout
	if l == nil {
		return e.Data
	}
	var out []byte
	last := 0
	for _, sp := range [...][2]int{l.PromptIDs, l.ResponseIDs, l.Request} {
		if sp == [2]int{} {
			continue
		}
		if sp[0] < last || sp[1] <= sp[0] || sp[1] > len(e.Data) {
			return e.Data
		}
		if out == nil {
			out = make([]byte, 0, 256+len(e.Data)/64)
		}
		out = append(append(out, e.Data[last:sp[0]]...), "null"...)
		last = sp[1]
	}
	if out == nil {
		return e.Data
	}
	return append(out, e.Data[last:]...)
}

// callSummary is the part of an api.ModelCall the metrics need; decoding
// into it skips the token arrays and bodies without allocating them.
type callSummary struct {
	API   string `json:"api"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	LatencyMS float64 `json:"latency_ms"`
	// HTTPStatus is set on the record of a refused or failed call.
	HTTPStatus int `json:"http_status"`
}

// observeCallEvent observes the call a model_request event describes,
// read from summary (the event, or its summaryData), else from data.
func (m *Metrics) observeCallEvent(summary, data []byte) {
	var c callSummary
	if json.Unmarshal(summary, &c) != nil && (len(summary) == len(data) || json.Unmarshal(data, &c) != nil) || c.API == "" {
		return
	}
	status := http.StatusOK
	if c.HTTPStatus != 0 {
		status = c.HTTPStatus
	}
	m.ObserveCall(c.API, status, time.Duration(c.LatencyMS*float64(time.Millisecond)), c.Usage.PromptTokens, c.Usage.CompletionTokens)
}

// stepSummary is the part of a trainer step's metrics ObserveStep needs.
type stepSummary struct {
	RewardMean  float64 `json:"reward_mean"`
	SuccessRate float64 `json:"success_rate"`
	RolloutSecs float64 `json:"rollout_seconds"`
	TrainSecs   float64 `json:"train_seconds"`
}

// TrainStepStored implements store.Observer: the step time, reward and
// success rate of each train-mode step reported.
func (m *Metrics) TrainStepStored(t store.TrainStep) {
	if t.Mode != store.ModeTrain {
		return
	}
	var st stepSummary
	if json.Unmarshal(t.Metrics, &st) == nil {
		m.ObserveStep(time.Duration((st.RolloutSecs+st.TrainSecs)*float64(time.Second)), st.RewardMean, st.SuccessRate)
	}
}

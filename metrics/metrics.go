// Package metrics exposes agl's Prometheus metrics at /metrics: model calls
// by API shape and status (count, latency, tokens, in flight), HTTP requests
// by route class, rollouts by status (read from the store at scrape time),
// events appended, reaper actions, and trainer step time, reward and
// success rate.
//
// Every Metrics owns its own registry; nothing is registered globally.
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/aglrl/agl/store"
)

// Options configure New.
type Options struct {
	// ScrapeTimeout bounds the store query of CountRollouts made at
	// scrape time (default 5s).
	ScrapeTimeout time.Duration
	// Runtime adds the Go runtime and process collectors.
	Runtime bool
	// CallsFromEvents makes EventsStored also record model calls (count,
	// latency, tokens, status) from the "model_request" events stored,
	// for when the proxy does not call ObserveCall itself. Do not set
	// both, or calls count twice.
	CallsFromEvents bool
}

// Metrics holds agl's metric families and the registry they live in.
// All methods are safe for concurrent use.
type Metrics struct {
	reg             *prometheus.Registry
	callsFromEvents bool
	scrapeTimeout   time.Duration

	calls        *prometheus.CounterVec
	callDuration *prometheus.HistogramVec
	tokens       *prometheus.CounterVec
	inFlight     *prometheus.GaugeVec

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	httpInFlight *prometheus.GaugeVec

	events  *prometheus.CounterVec
	reaper  *prometheus.CounterVec
	reaps   prometheus.Counter
	spans   *prometheus.CounterVec
	stepDur prometheus.Histogram
	steps   prometheus.Counter
	reward  prometheus.Gauge
	success prometheus.Gauge
}

// Model call latencies span sub-second cached replies to long generations.
var callBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// New builds a Metrics with a fresh registry.
func New(opt Options) *Metrics {
	if opt.ScrapeTimeout <= 0 {
		opt.ScrapeTimeout = 5 * time.Second
	}
	m := &Metrics{
		reg:             prometheus.NewRegistry(),
		callsFromEvents: opt.CallsFromEvents,
		scrapeTimeout:   opt.ScrapeTimeout,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agl_model_calls_total",
			Help: "Model calls served by the gateway, by API shape and HTTP status.",
		}, []string{"api", "status"}),
		callDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agl_model_call_duration_seconds",
			Help:    "Model call latency, by API shape and HTTP status.",
			Buckets: callBuckets,
		}, []string{"api", "status"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agl_tokens_total",
			Help: "Tokens through model calls, by API shape and direction (in = prompt, out = completion).",
		}, []string{"api", "direction"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agl_model_calls_in_flight",
			Help: "Model calls being served now, by API shape.",
		}, []string{"api"}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agl_http_requests_total",
			Help: "HTTP requests to the gateway, by route class and status.",
		}, []string{"route", "status"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agl_http_request_duration_seconds",
			Help:    "HTTP request latency, by route class.",
			Buckets: callBuckets,
		}, []string{"route"}),
		httpInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agl_http_requests_in_flight",
			Help: "HTTP requests being served now, by route class.",
		}, []string{"route"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agl_events_appended_total",
			Help: "Events appended to the store, by event type.",
		}, []string{"type"}),
		reaper: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agl_reaper_actions_total",
			Help: "Reaper actions, by kind (unresponsive, timed_out, requeued, failed).",
		}, []string{"action"}),
		reaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agl_reaper_passes_total",
			Help: "Reaper passes run.",
		}),
		spans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agl_otlp_spans_total",
			Help: "OpenTelemetry spans received, by outcome (stored, rejected).",
		}, []string{"outcome"}),
		stepDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "agl_trainer_step_duration_seconds",
			Help:    "Wall time of one trainer step.",
			Buckets: prometheus.ExponentialBuckets(0.5, 2, 14), // 0.5s … ~68min
		}),
		steps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agl_trainer_steps_total",
			Help: "Trainer steps completed.",
		}),
		reward: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agl_trainer_reward",
			Help: "Mean reward of the last trainer step's batch.",
		}),
		success: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agl_trainer_success_rate",
			Help: "Success rate of the last trainer step's batch.",
		}),
	}
	m.reg.MustRegister(m.calls, m.callDuration, m.tokens, m.inFlight,
		m.httpRequests, m.httpDuration, m.httpInFlight,
		m.events, m.reaper, m.reaps, m.spans, m.stepDur, m.steps, m.reward, m.success)
	for _, a := range []string{"unresponsive", "timed_out", "requeued", "failed"} {
		m.reaper.WithLabelValues(a) // export zeros so rate() works from the start
	}
	if opt.Runtime {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Registry returns the registry, to register more collectors on it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
// A failing collector (the store unreachable) leaves the others served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          m.reg, // promhttp_metric_handler_errors_total
		EnableOpenMetrics: true,
	})
}

// ObserveCall records one finished model call: api is its shape
// ("chat.completions", "completions", "responses", "messages"), status its
// HTTP status, d its latency, and the prompt/completion token counts.
func (m *Metrics) ObserveCall(api string, status int, d time.Duration, tokensIn, tokensOut int) {
	s := strconv.Itoa(status)
	m.calls.WithLabelValues(api, s).Inc()
	m.callDuration.WithLabelValues(api, s).Observe(d.Seconds())
	if tokensIn > 0 {
		m.tokens.WithLabelValues(api, "in").Add(float64(tokensIn))
	}
	if tokensOut > 0 {
		m.tokens.WithLabelValues(api, "out").Add(float64(tokensOut))
	}
}

// InFlight counts a model call of shape api as in flight until the
// returned function is called (call it exactly once, e.g. with defer).
func (m *Metrics) InFlight(api string) func() {
	g := m.inFlight.WithLabelValues(api)
	g.Inc()
	return g.Dec
}

// ObserveEvents counts n events of type typ appended to the store.
func (m *Metrics) ObserveEvents(typ string, n int) {
	if n > 0 {
		m.events.WithLabelValues(typ).Add(float64(n))
	}
}

// Reaped implements store.Observer: it records what one reaper pass did.
func (m *Metrics) Reaped(r store.ReapResult) {
	m.reaps.Inc()
	m.reaper.WithLabelValues("unresponsive").Add(float64(r.Unresponsive))
	m.reaper.WithLabelValues("timed_out").Add(float64(r.TimedOut))
	m.reaper.WithLabelValues("requeued").Add(float64(r.Requeued))
	m.reaper.WithLabelValues("failed").Add(float64(r.Failed))
}

// ObserveSpans counts OpenTelemetry spans stored and rejected by the intake.
func (m *Metrics) ObserveSpans(stored, rejected int) {
	m.spans.WithLabelValues("stored").Add(float64(stored))
	m.spans.WithLabelValues("rejected").Add(float64(rejected))
}

// ObserveStep records one trainer step: its wall time, and the batch's
// mean reward and success rate.
func (m *Metrics) ObserveStep(d time.Duration, reward, successRate float64) {
	m.steps.Inc()
	m.stepDur.Observe(d.Seconds())
	m.reward.Set(reward)
	m.success.Set(successRate)
}

var rolloutsDesc = prometheus.NewDesc("agl_rollouts", "Rollouts in the store, by status.", []string{"status"}, nil)

var allStatuses = []store.RolloutStatus{
	store.RolloutQueuing, store.RolloutRunning, store.RolloutRequeuing,
	store.RolloutSucceeded, store.RolloutFailed, store.RolloutCancelled,
}

// Counter counts rollouts by status (a store.Store does).
type Counter interface {
	CountRollouts(ctx context.Context) (store.Counts, error)
}

// CountRollouts makes every scrape report st's rollouts by status
// (agl_rollouts). Call it once, before serving the metrics.
func (m *Metrics) CountRollouts(st Counter) {
	m.reg.MustRegister(&rolloutCollector{st: st, timeout: m.scrapeTimeout, desc: rolloutsDesc})
}

// rolloutCollector asks the store for rollout counts at scrape time.
type rolloutCollector struct {
	st      Counter
	timeout time.Duration
	desc    *prometheus.Desc
}

func (c *rolloutCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *rolloutCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	counts, err := c.st.CountRollouts(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, s := range allStatuses {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
	for s, n := range counts { // statuses this build does not know
		if !s.Valid() {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), string(s))
		}
	}
}

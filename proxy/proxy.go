// Package proxy is agl's LLM gateway: the rollout-scoped OpenAI Chat
// Completions, Completions, Responses, Anthropic Messages and Gemini API
// routes a harness calls instead of its model provider.
//
// Every call is translated into agl's one conversation model (package chat),
// answered by a Backend (a token engine with a chat template, or an
// OpenAI-compatible vLLM/SGLang upstream), translated back into the caller's
// API shape (streaming or not), and recorded as one "model_request" event
// (api.ModelCall) with the exact prompt and response token ids. No byte of
// a call's answer is written before the store has made its event durable
// (store.EventRecorder where the store has one — SQLite's event journal —
// else AppendEvents, whose commit the store may share with concurrent
// calls: store.GroupCommit), so an answered call's event is exactly as
// durable as any other acknowledged write; a call whose event cannot be
// stored is answered with an error instead. (A streaming call whose answer
// took longer than StreamKeepAlive has sent headers and keep-alive comments
// before that; its content still follows the commit.)
//
// Routes, relative to the gateway root, authenticated by the attempt's
// scoped key (Authorization: Bearer KEY, or x-api-key: KEY):
//
//	POST /r/{rollout}/{attempt}/v1/chat/completions
//	POST /r/{rollout}/{attempt}/v1/completions
//	POST /r/{rollout}/{attempt}/v1/responses
//	POST /r/{rollout}/{attempt}/v1/messages       (Anthropic)
//	POST /r/{rollout}/{attempt}/v1/messages/count_tokens (token backends)
//	GET  /r/{rollout}/{attempt}/v1/models
//	POST /r/{rollout}/{attempt}/v1beta/models/{model}:generateContent       (Gemini)
//	POST /r/{rollout}/{attempt}/v1beta/models/{model}:streamGenerateContent (?alt=sse: SSE; else a JSON array)
//	POST /r/{rollout}/{attempt}/v1beta/models/{model}:countTokens           (token backends)
//	GET  /r/{rollout}/{attempt}/v1beta/models[/{model}]
//	POST /r/{rollout}/{attempt}/events            (harness rewards / custom events)
//
// Keys also arrive as the Gemini API sends them (x-goog-api-key, ?key=);
// a key given more than one way must be the same key. Errors come in the
// route's own shape (OpenAI, Anthropic or Google); an unknown route
// answers in the shape the request's headers and path point to
// (requestStyle).
//
// Every model route also answers under /r/{rollout}/{attempt}/agents/{agent}/
// (e.g. …/agents/writer/v1/chat/completions): the call is recorded for that
// agent of a multi-agent harness. A call names its agent, first match wins,
// by that path segment, by the X-Agl-Agent header, or by Config.Agents
// (requested model name → agent); else it is the default agent "". Agent
// names follow api.ValidAgentName (400 otherwise). Token state is kept per
// attempt and agent.
//
// ServeTrusted serves the same routes for callers the gateway authenticated
// itself.
package proxy

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/store"
)

// Proxy serves the rollout-scoped LLM routes. It is an http.Handler.
type Proxy struct {
	cfg     Config
	st      store.Store
	backend Backend

	idPrefix string
	seq      atomic.Uint64

	mu       sync.Mutex
	paused   bool
	inflight int
	idle     chan struct{} // closed when inflight drops to 0

	modesMu sync.RWMutex
	modes   map[string]store.Mode

	authMu sync.RWMutex
	auth   map[Target]authEntry

	usage usage // per-attempt calls and tokens (AttemptLimits), stored bytes
	// sizes holds the latest recorded call of each attempt and agent, to
	// measure a call's stored form (StoredCallBytes) before recording it.
	sizes *store.Bases
	seeds seeds // per-attempt sampling seeds (RolloutSeeds)
}

// New returns a proxy recording into st and answering with b.
// A TokenBackend behind it (directly or behind an AgentRouter) without a
// StateSource of its own continues token state from st's records of calls
// it did not serve (RecentCalls).
func New(cfg Config, st store.Store, b Backend) *Proxy {
	p := &Proxy{cfg: cfg.withDefaults(), st: st, backend: b, idPrefix: randSuffix(), modes: map[string]store.Mode{}, auth: map[Target]authEntry{},
		sizes: store.NewBases(sizesBytes)}
	if sb, ok := b.(stateSourced); ok {
		sb.useStateSource(p)
	}
	return p
}

// randSuffix returns 8 random base-36 characters.
func randSuffix() string {
	var b [8]byte
	rand.Read(b[:])
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	var out [8]byte
	x := binary.LittleEndian.Uint64(b[:])
	for i := range out {
		out[i] = digits[x%36]
		x /= 36
	}
	return string(out[:])
}

// newID returns a unique id with the given prefix ("chatcmpl-", "msg_", …).
func (p *Proxy) newID(prefix string) string {
	n := p.seq.Add(1)
	b := make([]byte, 0, len(prefix)+24)
	b = append(b, prefix...)
	b = append(b, p.idPrefix...)
	b = strconv.AppendUint(b, n, 36)
	return string(b)
}

// apiShape binds one API's translation functions.
type apiShape struct {
	name     string // api.Shape*
	style    errorStyle
	idPrefix string // of the response id
	// decode parses c.body into c.chat or c.complete.
	decode func(p *Proxy, c *call) *apiError
	// encode builds the final (non-streaming) response object.
	encode func(p *Proxy, c *call) ([]byte, error)
	// stream appends the whole SSE stream for c to buf.
	stream func(p *Proxy, c *call, buf []byte) []byte
	// maxTokens names the response length parameter in errors.
	maxTokens string
	// prepare, if set, reads what the shape takes from the request's
	// path and query (Gemini: the model, the stream form).
	prepare func(c *call, r *http.Request) *apiError
	// array, if set, writes the answer of a call with arrayStream
	// (Gemini's streamGenerateContent without alt=sse).
	array func(p *Proxy, c *call, buf []byte) []byte
}

var (
	shapeChat      = &apiShape{name: api.ShapeChatCompletions, idPrefix: "chatcmpl-", style: styleOpenAI, decode: decodeChat, encode: encodeChat, stream: streamChat, maxTokens: "max_tokens"}
	shapeComplete  = &apiShape{name: api.ShapeCompletions, idPrefix: "cmpl-", style: styleOpenAI, decode: decodeCompletion, encode: encodeCompletion, stream: streamCompletion, maxTokens: "max_tokens"}
	shapeResponses = &apiShape{name: api.ShapeResponses, idPrefix: "resp_", style: styleOpenAI, decode: decodeResponses, encode: encodeResponses, stream: streamResponses, maxTokens: "max_output_tokens"}
	shapeMessages  = &apiShape{name: api.ShapeMessages, idPrefix: "msg_", style: styleAnthropic, decode: decodeMessages, encode: encodeMessages, stream: streamMessages, maxTokens: "max_tokens"}
	shapeGemini    = &apiShape{name: api.ShapeGenerateContent, idPrefix: "gen-", style: styleGoogle, decode: decodeGemini, encode: encodeGemini, stream: streamGemini, maxTokens: "generationConfig.maxOutputTokens", prepare: prepareGemini, array: arrayGemini}
)

// call is the state of one model call through the proxy.
type call struct {
	shape   *apiShape
	target  Target
	mode    store.Mode
	body    []byte
	start   time.Time
	id      string
	created int64

	stream       bool
	includeUsage bool
	// arrayStream: a stream answered as one JSON array (shape.array).
	arrayStream bool
	// pathModel is the model named by the path (Gemini).
	pathModel string

	chat     *ChatRequest
	complete *CompleteRequest
	// aux carries shape-specific request details to the encoder.
	aux any
	// countOnly: Anthropic count_tokens (max_tokens not required).
	countOnly bool
	// ignored lists what the request asked for that the model does not
	// get (api.ModelCall.Ignored).
	ignored []string
	// header is the request's header (for shape-specific headers).
	header http.Header
	// model is the requested model name before mode overrides (for
	// Config.Agents).
	model string

	res *Result
}

// ServeHTTP implements http.Handler for the routes in the package doc.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/r/")
	var rid, aid, sub string
	if ok {
		rid, rest, ok = strings.Cut(rest, "/")
	}
	if ok {
		aid, sub, ok = strings.Cut(rest, "/")
	}
	sub = strings.TrimSuffix(sub, "/")
	style := requestStyle(r, sub)
	if !ok || rid == "" || aid == "" {
		writeError(w, style, &apiError{Status: http.StatusNotFound, Message: "unknown route " + r.URL.Path})
		return
	}
	p.dispatch(w, r, Target{RolloutID: rid, AttemptID: aid}, sub, style)
}

// trustedKey marks a request context whose caller the gateway already
// authenticated (ServeTrusted).
type trustedKey struct{}

// ServeTrusted serves route ("v1/chat/completions", "v1/messages",
// "events", …: the part after /r/{rollout}/{attempt}/) for an attempt
// without checking a scoped key: for routes the gateway authenticates
// itself (e.g. Agent Lightning-compatible
// /proxy/rollout/{rid}/attempt/{aid}/mode/{mode}/openai/v1/… routes behind
// admin auth). The attempt must still be running for model calls.
func (p *Proxy) ServeTrusted(w http.ResponseWriter, r *http.Request, rolloutID, attemptID, route string) {
	route = strings.Trim(route, "/")
	style := requestStyle(r, route)
	r = r.WithContext(context.WithValue(r.Context(), trustedKey{}, true))
	p.dispatch(w, r, Target{RolloutID: rolloutID, AttemptID: attemptID}, route, style)
}

// requestStyle is the error shape a request is answered in before (or
// without) a route's own: Anthropic's for anthropic-version or
// anthropic-beta headers or a v1/messages route, Google's for an
// x-goog-api-key header or a v1beta/ route, else OpenAI's.
func requestStyle(r *http.Request, route string) errorStyle {
	if rest, ok := strings.CutPrefix(route, "agents/"); ok {
		_, route, _ = strings.Cut(rest, "/")
	}
	switch {
	case r.Header.Get("anthropic-version") != "" || r.Header.Get("anthropic-beta") != "":
		return styleAnthropic
	case r.Header.Get("X-Goog-Api-Key") != "" || strings.HasPrefix(route, "v1beta/") || route == "v1beta":
		return styleGoogle
	case strings.HasPrefix(route, "v1/messages"):
		return styleAnthropic
	}
	return styleOpenAI
}

func (p *Proxy) dispatch(w http.ResponseWriter, r *http.Request, t Target, sub string, style errorStyle) {
	if rest, ok := strings.CutPrefix(sub, "agents/"); ok {
		agent, route, _ := strings.Cut(rest, "/")
		if route == "events" || !strings.HasPrefix(route, "v1/") && !strings.HasPrefix(route, "v1beta/") {
			writeError(w, style, &apiError{Status: http.StatusNotFound, Message: "unknown route " + r.URL.Path + ": only model routes (v1/…) take an agent", Code: "unknown_url"})
			return
		}
		if err := api.ValidAgentName(agent); err != nil {
			writeError(w, style, badRequest("agent", "path segment agents/{agent}: %v", err))
			return
		}
		t.Agent, sub = agent, route
	}
	switch sub {
	case "v1/chat/completions":
		p.serveCall(w, r, t, shapeChat)
	case "v1/completions":
		p.serveCall(w, r, t, shapeComplete)
	case "v1/responses":
		p.serveCall(w, r, t, shapeResponses)
	case "v1/messages":
		p.serveCall(w, r, t, shapeMessages)
	case "v1/messages/count_tokens":
		p.serveCountTokens(w, r, t, shapeMessages)
	case "v1/models":
		p.serveModels(w, r, t)
	case "events":
		p.serveEvents(w, r, t)
	case "v1beta/models":
		p.serveGeminiModels(w, r, t, "")
	default:
		if model, ok := strings.CutPrefix(sub, "v1beta/models/"); ok && model != "" {
			model, method, colon := strings.Cut(model, ":")
			switch {
			case !colon && !strings.Contains(model, "/"):
				p.serveGeminiModels(w, r, t, model)
				return
			case method == "generateContent" || method == "streamGenerateContent":
				p.serveCall(w, r, t, shapeGemini)
				return
			case method == "countTokens":
				p.serveCountTokens(w, r, t, shapeGemini)
				return
			}
		}
		writeError(w, style, &apiError{Status: http.StatusNotFound, Message: "unknown route " + r.URL.Path, Code: "unknown_url"})
	}
}

func (p *Proxy) serveCall(w http.ResponseWriter, r *http.Request, t Target, sh *apiShape) {
	style := callStyle(r.Context(), sh)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, style, &apiError{Status: http.StatusMethodNotAllowed, Message: "use POST"})
		return
	}
	if !p.admit() {
		secs := int((p.cfg.RetryAfter + time.Second - 1) / time.Second)
		writeError(w, style, &apiError{Status: http.StatusServiceUnavailable, Message: "the gateway is paused for a weight update; retry shortly", Code: "paused", RetryAfter: secs})
		return
	}
	defer p.release()
	c := &call{shape: sh, target: t, start: time.Now(), header: r.Header}
	ctx := r.Context()
	mode, aerr := p.authorize(ctx, r, t, true)
	if aerr != nil {
		writeError(w, style, aerr)
		return
	}
	c.mode = mode
	// From here on every refusal and failure is recorded: the key is
	// authenticated, so the record lands in the caller's own attempt.
	refuse := func(e *apiError) {
		p.recordError(ctx, c, e)
		writeError(w, style, e)
	}
	if c.body, aerr = p.readBody(w, r); aerr != nil {
		refuse(aerr)
		return
	}
	if sh.prepare != nil {
		if aerr = sh.prepare(c, r); aerr != nil {
			refuse(aerr)
			return
		}
	}
	if aerr = sh.decode(p, c); aerr != nil {
		refuse(aerr)
		return
	}
	if t.Agent == "" {
		if t.Agent = r.Header.Get(AgentHeader); t.Agent != "" {
			if err := api.ValidAgentName(t.Agent); err != nil {
				refuse(badRequest("", "header %s: %v", AgentHeader, err))
				return
			}
		} else {
			t.Agent = p.cfg.Agents[c.model]
		}
	}
	c.target = t
	if aerr := p.usage.admit(p.cfg.AttemptLimits, t); aerr != nil {
		refuse(aerr)
		return
	}
	if aerr := p.seedCall(ctx, c); aerr != nil {
		refuse(aerr)
		return
	}
	c.created = c.start.Unix()
	c.id = p.newID(sh.idPrefix)

	var ka *keepAlive
	if c.stream && p.cfg.StreamKeepAlive > 0 {
		ka = startKeepAlive(w, p.cfg.StreamKeepAlive)
	}
	fail := func(e *apiError) {
		p.recordError(ctx, c, e)
		if ka.stop() {
			w.Write(appendSSEError(nil, style, e))
			return
		}
		writeError(w, style, e)
	}
	bctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	var err error
	if c.chat != nil {
		c.chat.Target = t
		c.res, err = p.backend.Chat(bctx, c.chat)
	} else {
		c.complete.Target = t
		c.res, err = p.backend.Complete(bctx, c.complete)
	}
	cancel()
	if err != nil {
		fail(callError(ctx, err))
		return
	}
	p.usage.generated(p.cfg.AttemptLimits, t, len(c.res.ResponseIDs))
	if c.res.Model == "" {
		c.res.Model = p.backend.ModelName()
	}
	resp, err := sh.encode(p, c)
	if err != nil {
		fail(&apiError{Status: http.StatusInternalServerError, Message: "encode response: " + err.Error()})
		return
	}
	if aerr := p.record(ctx, c, resp); aerr != nil {
		fail(aerr)
		return
	}
	if v, _ := verbatim(ctx); v && c.res.Raw != nil && !c.stream && !c.arrayStream {
		// Agent Lightning's route: the upstream's answer, every field as
		// it sent them (agl's encoding is what the record keeps).
		resp = c.res.Raw
	}
	started := ka.stop()
	h := w.Header()
	if c.arrayStream {
		resp = sh.array(p, c, make([]byte, 0, 2*len(resp)+64))
	}
	if !c.stream {
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(resp)))
		w.Write(resp)
		return
	}
	if !started {
		setSSEHeaders(h)
	}
	out := sh.stream(p, c, make([]byte, 0, 2*len(resp)+512))
	w.Write(out)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// backendError maps a Backend error to an API error.
func backendError(err error) *apiError {
	var he *upstream.HTTPError
	switch {
	case errors.Is(err, ErrUnsupported):
		return &apiError{Status: http.StatusBadRequest, Message: err.Error(), Code: "unsupported_parameter"}
	case errors.Is(err, ErrBadRequest), errors.Is(err, engine.ErrInvalidPrompt):
		return &apiError{Status: http.StatusBadRequest, Message: err.Error()}
	case errors.As(err, &he) && he.Status >= 400 && he.Status < 500 && he.Status != http.StatusTooManyRequests && he.Status != http.StatusRequestTimeout:
		return &apiError{Status: he.Status, Message: "upstream: " + he.Message()}
	case errors.Is(err, upstream.ErrNoEndpoints):
		return &apiError{Status: http.StatusServiceUnavailable, Message: "model backend: " + err.Error() + " (register one: POST /api/models)", Code: "no_endpoints"}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: http.StatusGatewayTimeout, Message: "model call timed out: " + err.Error(), Code: "timeout"}
	case errors.Is(err, context.Canceled):
		return &apiError{Status: 499, Message: "request cancelled"}
	}
	return &apiError{Status: http.StatusBadGateway, Message: "model backend: " + err.Error(), Code: "backend_error"}
}

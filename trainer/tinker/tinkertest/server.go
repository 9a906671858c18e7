// Package tinkertest is a loopback stand-in for a Tinker service: it
// follows the wire of the official SDK (version tinker.SDKVersion),
// validates every request strictly (headers, JSON fields, protobuf
// fields, seq_id order) and computes real forward, backward, Adam and
// sampling on a tiny in-process model — a Bigram (New), or an embedded
// model directory's transformer (NewTransformer) — with Tinker's
// built-in losses summed per token.
package tinkertest

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aglrl/agl/model"
	"github.com/aglrl/agl/trainer/tinker"
)

// Server is the stand-in; read its state through its methods.
type Server struct {
	*httptest.Server
	Key string
	// vocab bounds every token id (SetVocab changes it while serving).
	vocab int
	Seed  uint64
	// baseDir, when set, is the embedded model directory every
	// create_model starts from (NewTransformer); tmp holds its saves.
	baseDir, tmp string
	// PerDatumMean makes the policy losses divide each datum's loss by
	// its target count, as SkyRL's JAX backend does (weights all ones).
	PerDatumMean bool

	mu       sync.Mutex
	sessions map[string]*session
	models   map[string]*trainModel
	order    []string // model ids in creation order
	futures  map[string]future
	saved    map[string]snapshot // tinker:// path → weights (and Adam state)
	nextID   int
	faults   map[string][]int // endpoint → statuses to answer next
	tryAgain int
	// requests counts the calls per endpoint (Count); errors lists the
	// requests the stand-in refused as malformed (MalformedRequests).
	requests map[string]int
	errors   []string
	lastGrad []float64
	busy     time.Duration
	// OnRequest, when set, sees every request's path, headers and body.
	OnRequest func(path string, h http.Header, body []byte)
}

type session struct{ expired bool }

type trainModel struct {
	session string
	m       learner
	seq     int32
}

type future struct {
	ctype string
	body  []byte
	err   string
}

// New starts a stand-in on loopback accepting key, with a vocab-token
// model seeded by seed.
func New(key string, vocab int, seed uint64) *Server {
	s := &Server{Key: key, vocab: vocab, Seed: seed, sessions: map[string]*session{}, models: map[string]*trainModel{},
		futures: map[string]future{}, saved: map[string]snapshot{}, faults: map[string][]int{}, requests: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	return s
}

// NewTransformer starts a stand-in on loopback accepting key whose base
// model is the embedded model directory dir (model.Load: config.json
// and safetensors): every create_model trains a fresh copy of it
// (Transformer), whose vocabulary the requests are checked against.
func NewTransformer(key, dir string) (*Server, error) {
	w, err := model.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("tinkertest: %w", err)
	}
	tmp, err := os.MkdirTemp("", "tinkertest-")
	if err != nil {
		return nil, err
	}
	s := New(key, w.Config.VocabSize, 0)
	s.baseDir, s.tmp = dir, tmp
	return s, nil
}

// Close stops the server and frees the saved weights' samplers.
func (s *Server) Close() {
	s.Server.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.saved {
		x.close()
	}
	if s.tmp != "" {
		os.RemoveAll(s.tmp)
	}
}

// SetVocab sets the vocabulary size token ids are checked against (and a
// new bigram's size), for a caller that learns it after the server
// started.
func (s *Server) SetVocab(n int) {
	s.mu.Lock()
	s.vocab = n
	s.mu.Unlock()
}

// Fail makes the next calls to path (e.g. "/api/v1/forward_backward")
// answer the given HTTP statuses, one each, before serving normally.
func (s *Server) Fail(path string, statuses ...int) {
	s.mu.Lock()
	s.faults[path] = append(s.faults[path], statuses...)
	s.mu.Unlock()
}

// TryAgain makes the next n retrieve_future calls answer try_again.
func (s *Server) TryAgain(n int) {
	s.mu.Lock()
	s.tryAgain += n
	s.mu.Unlock()
}

// Expire ends every session: heartbeats and calls on its models answer
// 404 from now on.
func (s *Server) Expire() {
	s.mu.Lock()
	for _, x := range s.sessions {
		x.expired = true
	}
	s.mu.Unlock()
}

// Snapshot returns a copy of the weights of model id's current state
// (nil unless it is a Bigram).
func (s *Server) Snapshot(modelID string) *Bigram {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.models[modelID]; m != nil {
		if b, ok := m.m.(*Bigram); ok {
			return b.Clone()
		}
	}
	return nil
}

// Weights returns the current weights of model id when it is a
// Transformer (NewTransformer).
func (s *Server) Weights(modelID string) (*model.Weights, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.models[modelID]
	if m == nil {
		return nil, fmt.Errorf("tinkertest: no model %s", modelID)
	}
	t, ok := m.m.(*Transformer)
	if !ok {
		return nil, fmt.Errorf("tinkertest: model %s is not a transformer", modelID)
	}
	return t.tr.Weights()
}

// Models lists the model ids created so far, in order.
func (s *Server) Models() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

// Count is the number of requests to path so far.
func (s *Server) Count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[path]
}

// LastGrad is the gradient the last optim_step of a Bigram applied
// (before clipping), for loss-semantics tests.
func (s *Server) LastGrad() []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lastGrad)
}

// Busy is the time the stand-in spent serving requests (its "GPU work"
// plus its decoding), for measuring the client's own share of a step.
func (s *Server) Busy() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy
}

// MalformedRequests returns the stand-in's refusals of malformed requests.
func (s *Server) MalformedRequests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errors)
}

type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func bad(format string, a ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, a...)}
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if s.OnRequest != nil {
		s.OnRequest(r.URL.Path, r.Header, body)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[r.URL.Path]++
	start := time.Now()
	var ctype string
	var out []byte
	var gen generate
	err := s.check(r)
	switch {
	case err != nil:
	case r.URL.Path == "/api/v1/asample":
		if gen, err = s.sample(body); err == nil {
			// Sampling runs outside the lock, so that concurrent samples
			// batch in the transformer's engine.
			s.mu.Unlock()
			res, gerr := gen(r.Context())
			s.mu.Lock()
			if err = gerr; err == nil {
				ctype, out, err = s.futureProto(res.Marshal(), "")
			}
		}
	default:
		ctype, out, err = s.serve(r, body)
	}
	s.busy += time.Since(start)
	if err != nil {
		he, ok := err.(*httpError)
		if !ok {
			he = &httpError{http.StatusInternalServerError, err.Error()}
		}
		if he.status == http.StatusBadRequest || he.status == http.StatusUnsupportedMediaType {
			s.errors = append(s.errors, r.URL.Path+": "+he.msg)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(he.status)
		_ = json.NewEncoder(w).Encode(map[string]string{"detail": he.msg})
		return
	}
	w.Header().Set("Content-Type", ctype)
	_, _ = w.Write(out)
}

// check refuses a request whose method, key, headers or content type
// are wrong, and answers an injected fault.
func (s *Server) check(r *http.Request) error {
	if r.Method != http.MethodPost {
		return &httpError{http.StatusMethodNotAllowed, "POST only"}
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-API-Key")), []byte(s.Key)) != 1 {
		return &httpError{http.StatusUnauthorized, "Invalid API key"}
	}
	if q := s.faults[r.URL.Path]; len(q) > 0 {
		s.faults[r.URL.Path] = q[1:]
		return &httpError{q[0], fmt.Sprintf("injected HTTP %d", q[0])}
	}
	if r.Header.Get("X-Idempotency-Key") == "" || !strings.HasPrefix(r.Header.Get("User-Agent"), "agl") {
		return bad("missing X-Idempotency-Key or User-Agent")
	}
	wantCT := "application/json"
	if r.URL.Path == "/api/v1/forward_backward" {
		wantCT = "application/x-protobuf"
	}
	if r.Header.Get("Content-Type") != wantCT {
		return &httpError{http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q, want %q", r.Header.Get("Content-Type"), wantCT)}
	}
	return nil
}

func (s *Server) serve(r *http.Request, body []byte) (string, []byte, error) {
	switch r.URL.Path {
	case "/api/v1/create_session":
		var q struct {
			Tags         *[]string       `json:"tags"`
			UserMetadata json.RawMessage `json:"user_metadata"`
			SDKVersion   string          `json:"sdk_version"`
			ProjectID    *string         `json:"project_id"`
			Type         string          `json:"type"`
		}
		if err := strict(body, &q, "create_session"); err != nil {
			return "", nil, err
		}
		if q.Tags == nil || q.SDKVersion != tinker.SDKVersion {
			return "", nil, bad("create_session: tags and sdk_version %q required", tinker.SDKVersion)
		}
		id := s.id("session")
		s.sessions[id] = &session{}
		return jsonOut(map[string]any{"type": "create_session", "session_id": id})
	case "/api/v1/session_heartbeat":
		var q struct {
			SessionID string `json:"session_id"`
			Type      string `json:"type"`
		}
		if err := strict(body, &q, "session_heartbeat"); err != nil {
			return "", nil, err
		}
		if x := s.sessions[q.SessionID]; x == nil || x.expired {
			return "", nil, &httpError{http.StatusNotFound, "session " + q.SessionID + " not found or expired"}
		}
		return jsonOut(map[string]any{"type": "session_heartbeat"})
	case "/api/v1/create_model":
		var q struct {
			SessionID    string          `json:"session_id"`
			ModelSeqID   *int            `json:"model_seq_id"`
			BaseModel    string          `json:"base_model"`
			UserMetadata json.RawMessage `json:"user_metadata"`
			LoraConfig   *struct {
				Rank         int    `json:"rank"`
				Seed         *int64 `json:"seed"`
				TrainUnembed bool   `json:"train_unembed"`
				TrainMLP     bool   `json:"train_mlp"`
				TrainAttn    bool   `json:"train_attn"`
			} `json:"lora_config"`
			Type string `json:"type"`
		}
		if err := strict(body, &q, "create_model"); err != nil {
			return "", nil, err
		}
		if x := s.sessions[q.SessionID]; x == nil || x.expired {
			return "", nil, &httpError{http.StatusNotFound, "session not found or expired"}
		}
		if q.ModelSeqID == nil || q.BaseModel == "" || q.LoraConfig == nil || q.LoraConfig.Rank <= 0 {
			return "", nil, bad("create_model: model_seq_id, base_model and lora_config.rank > 0 required")
		}
		id := fmt.Sprintf("%s:train:%d", q.SessionID, *q.ModelSeqID)
		if s.models[id] != nil {
			return "", nil, bad("create_model: model %s exists", id)
		}
		var m learner = NewBigram(s.vocab, s.Seed)
		if s.baseDir != "" {
			t, err := newTransformer(s.baseDir, s.tmp)
			if err != nil {
				return "", nil, fmt.Errorf("create_model: %w", err)
			}
			m = t
		}
		s.models[id] = &trainModel{session: q.SessionID, m: m}
		s.order = append(s.order, id)
		return s.futureJSON(map[string]any{"model_id": id, "type": "create_model"}, id)
	case "/api/v1/forward_backward":
		q, err := tinker.UnmarshalForwardBackwardRequest(body)
		if err != nil {
			return "", nil, bad("forward_backward: %v", err)
		}
		m, err := s.model(q.ModelID, q.SeqID)
		if err != nil {
			return "", nil, err
		}
		out, err := s.forwardBackward(r.Context(), m.m, q)
		if err != nil {
			return "", nil, err
		}
		return s.futureProto(out.Marshal(), q.ModelID)
	case "/api/v1/optim_step":
		var q struct {
			AdamParams *Adam  `json:"adam_params"`
			ModelID    string `json:"model_id"`
			SeqID      *int32 `json:"seq_id"`
			Type       string `json:"type"`
		}
		if err := strict(body, &q, "optim_step"); err != nil {
			return "", nil, err
		}
		if q.AdamParams == nil || q.SeqID == nil || q.AdamParams.LearningRate <= 0 {
			return "", nil, bad("optim_step: adam_params with learning_rate > 0 and seq_id required")
		}
		m, err := s.model(q.ModelID, *q.SeqID)
		if err != nil {
			return "", nil, err
		}
		if b, ok := m.m.(*Bigram); ok {
			s.lastGrad = slices.Clone(b.Grad)
		}
		norm, err := m.m.step(r.Context(), *q.AdamParams)
		if err != nil {
			return "", nil, fmt.Errorf("optim_step: %w", err)
		}
		return s.futureJSON(map[string]any{"metrics": map[string]float64{"grad_norm:mean": norm}}, q.ModelID)
	case "/api/v1/save_weights_for_sampler", "/api/v1/save_weights":
		var q struct {
			ModelID              string `json:"model_id"`
			Path                 string `json:"path"`
			SamplingSessionSeqID *int   `json:"sampling_session_seq_id"`
			SeqID                *int32 `json:"seq_id"`
			TTLSeconds           *int   `json:"ttl_seconds"`
			Overwrite            *bool  `json:"overwrite"`
			Type                 string `json:"type"`
		}
		kind := strings.TrimPrefix(r.URL.Path, "/api/v1/")
		if err := strict(body, &q, kind); err != nil {
			return "", nil, err
		}
		if q.SeqID == nil || q.Path == "" || strings.ContainsAny(q.Path, "/:") {
			return "", nil, bad("%s: seq_id and a plain path name required", kind)
		}
		m, err := s.model(q.ModelID, *q.SeqID)
		if err != nil {
			return "", nil, err
		}
		dir := "weights"
		if kind == "save_weights_for_sampler" {
			dir = "sampler_weights"
		}
		path := fmt.Sprintf("tinker://%s/%s/%s", q.ModelID, dir, q.Path)
		if _, ok := s.saved[path]; ok && (q.Overwrite == nil || !*q.Overwrite) && kind == "save_weights" {
			return "", nil, bad("save_weights: %s exists", path)
		}
		snap, err := m.m.save(s.id("save"))
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", kind, err)
		}
		if old := s.saved[path]; old != nil {
			old.close()
		}
		s.saved[path] = snap
		return s.futureJSON(map[string]any{"path": path, "type": kind}, q.ModelID)
	case "/api/v1/load_weights":
		var q struct {
			ModelID   string `json:"model_id"`
			SeqID     *int32 `json:"seq_id"`
			Path      string `json:"path"`
			Optimizer *bool  `json:"optimizer"`
			Type      string `json:"type"`
		}
		if err := strict(body, &q, "load_weights"); err != nil {
			return "", nil, err
		}
		if q.SeqID == nil || q.Optimizer == nil {
			return "", nil, bad("load_weights: seq_id and optimizer required")
		}
		m, err := s.model(q.ModelID, *q.SeqID)
		if err != nil {
			return "", nil, err
		}
		w := s.saved[q.Path]
		if w == nil || !strings.Contains(q.Path, "/weights/") {
			return "", nil, &httpError{http.StatusNotFound, "no checkpoint at " + q.Path}
		}
		if err := m.m.load(w, *q.Optimizer); err != nil {
			return "", nil, fmt.Errorf("load_weights: %w", err)
		}
		return s.futureJSON(map[string]any{"path": q.Path, "type": "load_weights"}, q.ModelID)
	case "/api/v1/retrieve_future":
		if a := r.Header.Get("Accept"); a != "application/json" && a != "application/x-protobuf" {
			return "", nil, bad("retrieve_future: Accept %q", a)
		}
		var q struct {
			RequestID         string `json:"request_id"`
			AllowMetadataOnly *bool  `json:"allow_metadata_only"`
		}
		if err := strict(body, &q, ""); err != nil {
			return "", nil, err
		}
		f, ok := s.futures[q.RequestID]
		if !ok {
			return "", nil, &httpError{http.StatusNotFound, "no request " + q.RequestID}
		}
		if s.tryAgain > 0 {
			s.tryAgain--
			return jsonOut(map[string]any{"type": "try_again", "request_id": q.RequestID, "queue_state": "active"})
		}
		if f.err != "" {
			return jsonOut(map[string]any{"error": f.err, "category": "user"})
		}
		if f.ctype == "application/x-protobuf" && r.Header.Get("Accept") != f.ctype {
			return "", nil, bad("retrieve_future: a protobuf result asked for as %q", r.Header.Get("Accept"))
		}
		return f.ctype, f.body, nil
	}
	return "", nil, &httpError{http.StatusNotFound, "no endpoint " + r.URL.Path}
}

func (s *Server) id(kind string) string {
	s.nextID++
	return fmt.Sprintf("%s-%d", kind, s.nextID)
}

// model checks model id's session and that seq is its next seq_id.
func (s *Server) model(id string, seq int32) (*trainModel, error) {
	m := s.models[id]
	if m == nil {
		return nil, &httpError{http.StatusNotFound, "no model " + id}
	}
	if s.sessions[m.session].expired {
		return nil, &httpError{http.StatusNotFound, "session of " + id + " expired"}
	}
	if seq != m.seq+1 {
		return nil, bad("model %s: seq_id %d, want %d", id, seq, m.seq+1)
	}
	m.seq = seq
	return m, nil
}

func (s *Server) futureJSON(v any, modelID string) (string, []byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", nil, err
	}
	return s.addFuture("application/json", b, modelID)
}

func (s *Server) futureProto(b []byte, modelID string) (string, []byte, error) {
	return s.addFuture("application/x-protobuf", b, modelID)
}

func (s *Server) addFuture(ctype string, b []byte, modelID string) (string, []byte, error) {
	id := s.id("req")
	s.futures[id] = future{ctype: ctype, body: b}
	out := map[string]any{"request_id": id}
	if modelID != "" {
		out["model_id"] = modelID
	}
	return jsonOut(out)
}

func jsonOut(v any) (string, []byte, error) {
	b, err := json.Marshal(v)
	return "application/json", b, err
}

// strict decodes a JSON body refusing unknown fields, and checks its
// "type" literal when typ is not "".
func strict(body []byte, v any, typ string) error {
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return bad("%s: %v", typ, err)
	}
	if typ == "" {
		return nil
	}
	var t struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &t)
	if t.Type != typ {
		return bad("type %q, want %q", t.Type, typ)
	}
	return nil
}

// forwardBackward computes Tinker's built-in losses on datums (per-token
// SUM, no normalisation) and accumulates the gradient.
func (s *Server) forwardBackward(ctx context.Context, m learner, q tinker.ForwardBackwardRequest) (tinker.ForwardBackwardOutput, error) {
	out := tinker.ForwardBackwardOutput{LossFnOutputType: "ArrayRecord", Metrics: map[string]float64{}}
	lo, hi := 0.8, 1.2
	switch q.LossFn {
	case "cross_entropy", "importance_sampling":
		if len(q.LossFnConfig) > 0 {
			return out, bad("forward_backward: %s takes no loss_fn_config", q.LossFn)
		}
	case "ppo":
		for k, v := range q.LossFnConfig {
			switch k {
			case "clip_low_threshold":
				lo = v
			case "clip_high_threshold":
				hi = v
			default:
				return out, bad("forward_backward: unknown loss_fn_config key %q", k)
			}
		}
	default:
		return out, bad("forward_backward: unknown loss_fn %q", q.LossFn)
	}
	if len(q.Data) == 0 {
		return out, bad("forward_backward: no data")
	}
	var tokens, targets [][]int32
	var inputs []map[string][]float64
	for i, d := range q.Data {
		n := len(d.Tokens)
		if n == 0 {
			return out, bad("datum %d: empty model_input", i)
		}
		vals := map[string][]float64{}
		want := []string{"target_tokens", "logprobs", "advantages"}
		if q.LossFn == "cross_entropy" {
			want = []string{"target_tokens", "weights"}
		}
		if len(d.Inputs) != len(want) {
			return out, bad("datum %d: loss_fn_inputs %v, want %v", i, keys(d.Inputs), want)
		}
		for _, k := range want {
			t, ok := d.Inputs[k]
			if !ok {
				return out, bad("datum %d: loss_fn_inputs lacks %q", i, k)
			}
			wantDT := tinker.DTypeFloat32
			if k == "target_tokens" {
				wantDT = tinker.DTypeInt64
			}
			if t.DType != wantDT {
				return out, bad("datum %d: %s has dtype %d, want %d", i, k, t.DType, wantDT)
			}
			v, err := t.Values()
			if err != nil {
				return out, bad("datum %d: %s: %v", i, k, err)
			}
			if len(v) != n {
				return out, bad("datum %d: %s has %d values for %d input tokens", i, k, len(v), n)
			}
			vals[k] = v
		}
		tg := make([]int32, n)
		for t, x := range vals["target_tokens"] {
			if x < 0 || int(x) >= s.vocab {
				return out, bad("datum %d: target token %v outside the vocabulary", i, x)
			}
			tg[t] = int32(x)
		}
		for t, x := range d.Tokens {
			if x < 0 || int(x) >= s.vocab {
				return out, bad("datum %d: input token %d outside the vocabulary", i, x)
			}
			if t+1 < n && d.Tokens[t+1] != tg[t] {
				return out, bad("datum %d: target_tokens[%d] = %d is not model_input[%d] = %d", i, t, tg[t], t+1, d.Tokens[t+1])
			}
		}
		tokens, targets, inputs = append(tokens, d.Tokens), append(targets, tg), append(inputs, vals)
	}
	lps, err := m.logprobs(ctx, tokens, targets)
	if err != nil {
		return out, fmt.Errorf("forward_backward: %w", err)
	}
	grads := make([][]float64, len(tokens))
	var total float64
	for i, lp := range lps {
		n, vals := len(lp), inputs[i]
		g := make([]float64, n)
		norm := 1.0
		if s.PerDatumMean && q.LossFn != "cross_entropy" {
			norm = float64(n)
		}
		for t := range lp {
			switch q.LossFn {
			case "cross_entropy":
				w := vals["weights"][t]
				total += -w * lp[t]
				g[t] = -w
			default:
				A, qlp := vals["advantages"][t], vals["logprobs"][t]
				r := math.Exp(lp[t] - qlp)
				l1 := r * A
				if q.LossFn == "importance_sampling" {
					total += -l1 / norm
					g[t] = -r * A / norm
					continue
				}
				l2 := math.Max(lo, math.Min(r, hi)) * A
				total += -math.Min(l1, l2) / norm
				if l1 <= l2 {
					g[t] = -r * A / norm
				}
			}
		}
		out.Outputs = append(out.Outputs, map[string][]float64{"logprobs": lp})
		grads[i] = g
	}
	if !q.ForwardOnly {
		if err := m.backward(ctx, tokens, targets, grads); err != nil {
			return out, fmt.Errorf("forward_backward: %w", err)
		}
	}
	out.Metrics["loss:sum"] = total
	return out, nil
}

func keys(m map[string]tinker.Tensor) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	slices.Sort(k)
	return k
}

// sample checks a sample request and returns its generation.
func (s *Server) sample(body []byte) (generate, error) {
	var q struct {
		NumSamples int `json:"num_samples"`
		Prompt     struct {
			Chunks []struct {
				Tokens []int32 `json:"tokens"`
				Type   string  `json:"type"`
			} `json:"chunks"`
		} `json:"prompt"`
		SamplingParams struct {
			MaxTokens   *int     `json:"max_tokens"`
			Seed        *uint64  `json:"seed"`
			Stop        []int32  `json:"stop"`
			Temperature *float64 `json:"temperature"`
			TopK        *int     `json:"top_k"`
			TopP        *float64 `json:"top_p"`
		} `json:"sampling_params"`
		BaseModel          *string `json:"base_model"`
		ModelPath          string  `json:"model_path"`
		SamplingSessionID  *string `json:"sampling_session_id"`
		SeqID              *int    `json:"seq_id"`
		PromptLogprobs     *bool   `json:"prompt_logprobs"`
		TopkPromptLogprobs int     `json:"topk_prompt_logprobs"`
		Type               string  `json:"type"`
	}
	if err := strict(body, &q, "sample"); err != nil {
		return nil, err
	}
	sp := q.SamplingParams
	if q.NumSamples != 1 || len(q.Prompt.Chunks) != 1 || q.Prompt.Chunks[0].Type != "encoded_text" || len(q.Prompt.Chunks[0].Tokens) == 0 {
		return nil, bad("sample: one sample of one non-empty encoded_text chunk expected")
	}
	if sp.MaxTokens == nil || *sp.MaxTokens <= 0 || sp.Temperature == nil || *sp.Temperature < 0 || sp.TopK == nil || sp.TopP == nil {
		return nil, bad("sample: sampling_params need max_tokens > 0, temperature ≥ 0, top_k, top_p")
	}
	w := s.saved[q.ModelPath]
	if w == nil || !strings.Contains(q.ModelPath, "/sampler_weights/") {
		return nil, &httpError{http.StatusNotFound, "no sampler weights at " + q.ModelPath}
	}
	prompt := q.Prompt.Chunks[0].Tokens
	for _, t := range prompt {
		if t < 0 || int(t) >= s.vocab {
			return nil, bad("sample: prompt token %d outside the vocabulary", t)
		}
	}
	seed := uint64(0)
	if sp.Seed != nil {
		seed = *sp.Seed
	}
	return generate(func(ctx context.Context) (tinker.SampleResponse, error) {
		toks, lps, stopped, err := w.sample(ctx, prompt, *sp.MaxTokens, *sp.Temperature, *sp.TopP, *sp.TopK, sp.Stop, seed)
		if err != nil {
			return tinker.SampleResponse{}, fmt.Errorf("sample: %w", err)
		}
		res := tinker.SampleResponse{Sequences: []tinker.SampledSequence{{Tokens: toks, Logprobs: lps, StopReason: tinker.StopReasonLength}}}
		if stopped {
			res.Sequences[0].StopReason = tinker.StopReasonStop
		}
		return res, nil
	}), nil
}

// generate is sample's work, which handle runs outside the lock.
type generate func(ctx context.Context) (tinker.SampleResponse, error)

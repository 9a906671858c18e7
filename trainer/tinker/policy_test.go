package tinker_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/trainer/tinker"
	"github.com/aglrl/agl/trainer/tinker/tinkertest"
)

const (
	vocab = 16
	key   = "tml-test-key"
)

func standIn(t *testing.T) *tinkertest.Server {
	t.Helper()
	s := tinkertest.New(key, vocab, 7)
	t.Cleanup(func() {
		s.Close()
		if bad := s.MalformedRequests(); len(bad) > 0 {
			t.Errorf("the stand-in refused malformed requests: %q", bad)
		}
	})
	return s
}

func client(t *testing.T, s *tinkertest.Server, k string) *tinker.Client {
	t.Helper()
	c, err := tinker.NewClient(s.URL, k)
	if err != nil {
		t.Fatal(err)
	}
	c.RetryBase, c.RetryMax = time.Millisecond, 5*time.Millisecond
	return c
}

func options(loss string) tinker.Options {
	return tinker.Options{Name: "calc", BaseModel: "stand-in/bigram-16", LoRA: tinker.LoRA{Rank: 4, TrainMLP: true, TrainAttn: true},
		Loss: loss, ClipLow: 0.2, ClipHigh: 0.28, Adam: tinker.Adam{LearningRate: 0.05, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8},
		MicroBatchTokens: 16, MaxContext: 64}
}

func newPolicy(t *testing.T, s *tinkertest.Server, o tinker.Options) *tinker.Policy {
	t.Helper()
	p, err := tinker.New(context.Background(), client(t, s, key), o, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// batch makes samples on the stand-in's model m: 3 prompt tokens, a
// response whose behaviour log-probs are the model's own shifted by up
// to ±0.5 (so ratios leave the clip range), weights in (0.1, 1) and
// advantages of both signs.
func batch(m *tinkertest.Bigram, seed uint64) []samples.Sample {
	r := rand.New(rand.NewPCG(seed, 1))
	var ss []samples.Sample
	for k := 0; k < 5; k++ {
		n := 6 + r.IntN(5)
		s := samples.Sample{RolloutID: string(rune('a' + k)), Advantage: r.Float64()*2 - 1}
		for i := 0; i < n; i++ {
			s.IDs = append(s.IDs, int32(r.IntN(vocab)))
		}
		lp := m.Logprobs(s.IDs[:n-1], s.IDs[1:])
		s.LossMask, s.Logprobs, s.Weights = make([]uint8, n), make([]float32, n), make([]float32, n)
		for i := 3; i < n; i++ {
			s.LossMask[i] = 1
			s.Logprobs[i] = float32(lp[i-1] + r.Float64() - 0.5)
			s.Weights[i] = float32(0.1 + 0.9*r.Float64())
		}
		ss = append(ss, s)
	}
	return ss
}

// reference is the gradient agl's own loss gives for ss on weights m:
// samples.PolicyLoss (the reference the embedded trainer's graph loss
// matches) for the policy losses, the embedded SFT loss Σ w·m·(−logπ)
// for cross_entropy, chained through the same model.
func reference(t *testing.T, m *tinkertest.Bigram, ss []samples.Sample, loss string, cfg samples.LossConfig) []float64 {
	t.Helper()
	ref := m.Clone()
	clear(ref.Grad)
	var logp []float64
	for _, s := range ss {
		n := len(s.IDs)
		logp = append(logp, 0) // IDs[0] is never predicted
		logp = append(logp, ref.Logprobs(s.IDs[:n-1], s.IDs[1:])...)
	}
	in, err := samples.LossInputsFor(ss, logp)
	if err != nil {
		t.Fatal(err)
	}
	grad := make([]float64, len(logp))
	if loss == tinker.LossCrossEntropy {
		for i := range grad {
			grad[i] = -in.Weight[i] * in.Mask[i]
		}
	} else {
		_, st, err := samples.PolicyLoss(cfg, in)
		if err != nil {
			t.Fatal(err)
		}
		grad = st.Grad
	}
	off := 0
	for _, s := range ss {
		n := len(s.IDs)
		ref.Backward(s.IDs[:n-1], s.IDs[1:], grad[off+1:off+n])
		off += n
	}
	return ref.Grad
}

// TestLossSemantics: the gradient the stand-in computes from agl's
// datums (Tinker's per-token SUM of its built-in loss) equals agl's own
// loss gradient for the same samples: weights folded into advantages
// (policy losses) or into the cross-entropy weights. importance_sampling
// is agl's loss without a clip; ppo is agl's clipped loss with
// trainer.clip_low/high. On a server that averages each datum's loss
// (SkyRL's JAX backend) the datums are scaled to give the same gradient.
func TestLossSemantics(t *testing.T) {
	for _, tc := range []struct {
		loss, server string
		cfg          samples.LossConfig
	}{
		{tinker.LossImportanceSampling, tinker.ServerTinker, samples.LossConfig{ClipLow: 1, ClipHigh: 1e9}},
		{tinker.LossPPO, tinker.ServerTinker, samples.LossConfig{ClipLow: 0.2, ClipHigh: 0.28}},
		{tinker.LossCrossEntropy, tinker.ServerTinker, samples.LossConfig{}},
		{tinker.LossPPO, tinker.ServerSkyRLJAX, samples.LossConfig{ClipLow: 0.2, ClipHigh: 0.28}},
	} {
		t.Run(tc.loss+"-"+tc.server, func(t *testing.T) {
			s := standIn(t)
			s.PerDatumMean = tc.server == tinker.ServerSkyRLJAX
			o := options(tc.loss)
			o.Server = tc.server
			p := newPolicy(t, s, o)
			m0 := s.Snapshot(s.Models()[0])
			ss := batch(m0, 3)
			st, err := p.Step(context.Background(), ss)
			if err != nil {
				t.Fatal(err)
			}
			if n := s.Count("/api/v1/forward_backward"); n < 2 {
				t.Fatalf("%d forward_backward calls: the micro-batch budget should split the step", n)
			}
			want := reference(t, m0, ss, tc.loss, tc.cfg)
			got := s.LastGrad()
			var norm, diff float64
			for i := range want {
				norm += want[i] * want[i]
				diff += (got[i] - want[i]) * (got[i] - want[i])
			}
			if norm == 0 || math.Sqrt(diff) > 1e-5*math.Sqrt(norm) {
				t.Fatalf("gradient differs from agl's loss: |Δ| = %g, |ref| = %g", math.Sqrt(diff), math.Sqrt(norm))
			}
			if st.Tokens == 0 || st.GradNorm == 0 {
				t.Errorf("stats %+v", st)
			}
			if tc.loss == tinker.LossPPO && st.ClipFrac == 0 {
				t.Errorf("no token clipped: the batch does not exercise the clip (%+v)", st)
			}
			// The update changed the served weights once published.
			if err := p.Publish(context.Background(), 2); err != nil {
				t.Fatal(err)
			}
			if p.Engine().Version() != 2 {
				t.Errorf("engine serves version %d", p.Engine().Version())
			}
		})
	}
}

// A step survives one try_again, one 429 and one 500, each where the SDK
// retries it: the same step without faults is the baseline of the calls.
func TestStepRetries(t *testing.T) {
	s := standIn(t)
	p := newPolicy(t, s, options(tinker.LossPPO))
	ss := batch(s.Snapshot(s.Models()[0]), 4)
	const fb, rf = "/api/v1/forward_backward", "/api/v1/retrieve_future"
	step := func() (int, int) {
		f0, r0 := s.Count(fb), s.Count(rf)
		if _, err := p.Step(context.Background(), ss); err != nil {
			t.Fatal(err)
		}
		return s.Count(fb) - f0, s.Count(rf) - r0
	}
	cleanFB, cleanRF := step()
	s.TryAgain(1)
	s.Fail(fb, http.StatusTooManyRequests)
	s.Fail(rf, http.StatusInternalServerError)
	gotFB, gotRF := step()
	if gotFB != cleanFB+1 || gotRF != cleanRF+2 {
		t.Errorf("forward_backward %d calls (clean %d), retrieve_future %d (clean %d): want one and two retries",
			gotFB, cleanFB, gotRF, cleanRF)
	}
}

// A 500 on a call that enqueues work is not retried (it may have run).
func TestNoRetryOfEnqueueOn500(t *testing.T) {
	s := standIn(t)
	p := newPolicy(t, s, options(tinker.LossPPO))
	s.Fail("/api/v1/optim_step", http.StatusInternalServerError)
	_, err := p.Step(context.Background(), batch(s.Snapshot(s.Models()[0]), 5))
	if err == nil || !strings.Contains(err.Error(), "tinker /api/v1/optim_step: HTTP 500") {
		t.Fatalf("error %v", err)
	}
	if s.Count("/api/v1/optim_step") != 1 {
		t.Errorf("optim_step sent %d times", s.Count("/api/v1/optim_step"))
	}
}

func TestWrongKey(t *testing.T) {
	s := standIn(t)
	_, err := tinker.New(context.Background(), client(t, s, "tml-wrong"), options(tinker.LossPPO), "", 1)
	if err == nil {
		t.Fatal("a wrong key was accepted")
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "/api/v1/create_session: HTTP 401") || strings.Contains(msg, "tml-wrong") {
		t.Errorf("error %q: want one line naming the endpoint and 401, without the key", msg)
	}
	if len(s.Models()) != 0 {
		t.Errorf("models created: %v", s.Models())
	}
}

func TestExpiredSession(t *testing.T) {
	s := standIn(t)
	c := client(t, s, key)
	c.HeartbeatPeriod = 5 * time.Millisecond
	p, err := tinker.New(context.Background(), c, options(tinker.LossPPO), "", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ss := batch(s.Snapshot(s.Models()[0]), 6)
	s.Expire()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err = p.Step(context.Background(), ss); err != nil && strings.Contains(err.Error(), "lost") {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "session") || !strings.Contains(err.Error(), "stale sampler") {
		t.Fatalf("step after expiry: %v", err)
	}
	if _, err := p.Engine().Generate(context.Background(), []int32{1, 2}, engine.Sampling{MaxTokens: 3}); err == nil {
		t.Error("generation went on after the session was lost")
	}
}

func TestGenerate(t *testing.T) {
	s := standIn(t)
	p := newPolicy(t, s, options(tinker.LossPPO))
	e := p.Engine()
	sp := engine.Sampling{Temperature: 1, MaxTokens: 6, StopIDs: []int32{15}, Seed: 42}
	r1, err := e.Generate(context.Background(), []int32{1, 2, 3}, sp)
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := e.Generate(context.Background(), []int32{1, 2, 3}, sp)
	if len(r1.IDs) == 0 || len(r1.IDs) != len(r1.Logprobs) || r1.ModelVersion != 1 || r1.Model != "calc" {
		t.Fatalf("result %+v", r1)
	}
	if len(r1.IDs) != len(r2.IDs) || r1.IDs[0] != r2.IDs[0] {
		t.Errorf("same seed, different samples: %v %v", r1.IDs, r2.IDs)
	}
	// The log-probs are the served model's own.
	m := s.Snapshot(s.Models()[0])
	want := m.Logprobs(append([]int32{3}, r1.IDs[:len(r1.IDs)-1]...), r1.IDs)
	for i := range want {
		if math.Abs(want[i]-float64(r1.Logprobs[i])) > 1e-5 {
			t.Fatalf("logprob %d: %v, model %v", i, r1.Logprobs[i], want[i])
		}
	}
	if r1.FinishReason == engine.FinishStop && r1.IDs[len(r1.IDs)-1] != 15 {
		t.Errorf("stop without the stop id: %+v", r1)
	}
	if _, err := e.Generate(context.Background(), make([]int32, 64), sp); !errors.Is(err, engine.ErrInvalidPrompt) {
		t.Errorf("a prompt filling the context: %v", err)
	}
}

func TestCheckpointResume(t *testing.T) {
	s := standIn(t)
	p := newPolicy(t, s, options(tinker.LossPPO))
	id := s.Models()[0]
	if _, err := p.Step(context.Background(), batch(s.Snapshot(id), 7)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := p.SaveCheckpoint(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "tinker.json"))
	if err != nil || !strings.Contains(string(b), `"state_path": "tinker://`) {
		t.Fatalf("checkpoint %s %v", b, err)
	}
	saved := s.Snapshot(id)
	q, err := tinker.New(context.Background(), client(t, s, key), options(tinker.LossPPO), dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ids := s.Models()
	got := s.Snapshot(ids[len(ids)-1])
	for i := range saved.W {
		if saved.W[i] != got.W[i] || saved.M[i] != got.M[i] {
			t.Fatalf("weight %d: resumed %v/%v, saved %v/%v", i, got.W[i], got.M[i], saved.W[i], saved.M[i])
		}
	}
	if got.T != saved.T || q.Engine().Version() != 2 {
		t.Errorf("Adam step %d vs %d, version %d", got.T, saved.T, q.Engine().Version())
	}
	other := options(tinker.LossPPO)
	other.BaseModel = "another"
	if _, err := tinker.New(context.Background(), client(t, s, key), other, dir, 2); err == nil || !strings.Contains(err.Error(), "base model") {
		t.Errorf("resume on another base model: %v", err)
	}
}

// mangler serves s through a proxy that rewrites the protobuf results of
// retrieve_future with f (the body's decoded kind decides what to break).
func mangler(t *testing.T, s *tinkertest.Server, f func(body []byte) []byte) *httptest.Server {
	t.Helper()
	h := s.Config.Handler
	m := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		if r.URL.Path == "/api/v1/retrieve_future" && rec.Header().Get("Content-Type") == "application/x-protobuf" {
			body = f(body)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	}))
	t.Cleanup(m.Close)
	return m
}

// Malformed, truncated, huge or inconsistent answers fail the call with
// an error naming the endpoint; they never become samples or stats.
func TestMalformedAnswers(t *testing.T) {
	fbOut := func(f func(o *tinker.ForwardBackwardOutput)) func([]byte) []byte {
		return func(b []byte) []byte {
			o, err := tinker.UnmarshalForwardBackwardOutput(b)
			if err != nil {
				t.Errorf("the stand-in's forward_backward result: %v", err)
			}
			f(&o)
			return o.Marshal()
		}
	}
	sample := func(f func(r *tinker.SampleResponse)) func([]byte) []byte {
		return func(b []byte) []byte {
			r, err := tinker.UnmarshalSampleResponse(b)
			if err != nil {
				t.Errorf("the stand-in's sample result: %v", err)
			}
			f(&r)
			return r.Marshal()
		}
	}
	for _, tc := range []struct {
		name, op, want string
		mangle         func([]byte) []byte
		limit          int64
	}{
		{"truncated fb", "step", "/api/v1/forward_backward: malformed answer", func(b []byte) []byte { return b[:len(b)-7] }, 0},
		{"missing datum", "step", "/api/v1/forward_backward: 2 outputs for 3 datums",
			fbOut(func(o *tinker.ForwardBackwardOutput) { o.Outputs = o.Outputs[:len(o.Outputs)-1] }), 0},
		{"short logprobs", "step", "/api/v1/forward_backward: datum 0:",
			fbOut(func(o *tinker.ForwardBackwardOutput) { o.Outputs[0]["logprobs"] = o.Outputs[0]["logprobs"][1:] }), 0},
		{"nan loss", "step", "/api/v1/forward_backward: metric loss:sum is NaN",
			fbOut(func(o *tinker.ForwardBackwardOutput) { o.Metrics["loss:sum"] = math.NaN() }), 0},
		{"huge", "step", "/api/v1/retrieve_future: reading the answer: answer exceeds 4096 bytes",
			func(b []byte) []byte { return append(b, make([]byte, 1<<20)...) }, 4096},
		{"too many tokens", "sample", "/api/v1/asample: 5 tokens for max_tokens 4",
			sample(func(r *tinker.SampleResponse) {
				q := &r.Sequences[0]
				q.Tokens, q.Logprobs = []int32{1, 2, 3, 4, 5}, []float32{-1, -1, -1, -1, -1}
			}), 0},
		{"logprob count", "sample", "/api/v1/asample: 2 logprobs for 3 tokens",
			sample(func(r *tinker.SampleResponse) {
				q := &r.Sequences[0]
				q.Tokens, q.Logprobs = []int32{1, 2, 3}, []float32{-1, -1}
			}), 0},
		{"positive logprob", "sample", "/api/v1/asample: logprob 0.5 at token 0",
			sample(func(r *tinker.SampleResponse) { r.Sequences[0].Logprobs[0] = 0.5 }), 0},
		{"truncated sample", "sample", "/api/v1/asample: malformed answer", func(b []byte) []byte { return b[:len(b)-3] }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Only protobuf results are mangled: New's calls are all JSON.
			s := standIn(t)
			c, _ := tinker.NewClient(mangler(t, s, tc.mangle).URL, key)
			c.RetryBase, c.MaxRetries = time.Millisecond, 1
			if tc.limit > 0 {
				c.MaxResponseBytes = tc.limit
			}
			o := options(tinker.LossPPO)
			o.MicroBatchTokens = 1000
			p, err := tinker.New(context.Background(), c, o, "", 1)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ss := batch(s.Snapshot(s.Models()[0]), 8)[:3]
			if tc.op == "step" {
				_, err = p.Step(context.Background(), ss)
			} else {
				_, err = p.Engine().Generate(context.Background(), []int32{1, 2}, engine.Sampling{Temperature: 1, MaxTokens: 4, Seed: 1})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line containing %q", err, tc.want)
			}
		})
	}
}

// What a server's loss semantics cannot express is refused by name.
func TestServerRefusals(t *testing.T) {
	s := standIn(t)
	for _, tc := range []struct{ server, loss, want string }{
		{tinker.ServerSkyRLJAX, tinker.LossCrossEntropy, "cross_entropy on skyrl-jax"},
		{tinker.ServerSkyRLTrain, tinker.LossPPO, "ppo on skyrl-train"},
		{"verl", tinker.LossPPO, `server "verl"`},
	} {
		o := options(tc.loss)
		o.Server = tc.server
		if _, err := tinker.New(context.Background(), client(t, s, key), o, "", 1); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s/%s: %v", tc.server, tc.loss, err)
		}
	}
	if len(s.Models()) != 0 {
		t.Errorf("a refused policy created models %v", s.Models())
	}
}

// BenchmarkStep measures one step (forward_backward calls, optim_step,
// save_weights_for_sampler) of 16 samples of 256 tokens (128 trained)
// against the stand-in: the bytes on the wire per step and agl's share
// of the step's wall time outside the service's serving time.
func BenchmarkStep(b *testing.B) {
	s := tinkertest.New(key, 256, 7)
	defer s.Close()
	c, err := tinker.NewClient(s.URL, key)
	if err != nil {
		b.Fatal(err)
	}
	o := options(tinker.LossPPO)
	o.MicroBatchTokens = 4096
	p, err := tinker.New(context.Background(), c, o, "", 1)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	r := rand.New(rand.NewPCG(1, 2))
	ss := make([]samples.Sample, 16)
	for k := range ss {
		n := 256
		x := samples.Sample{RolloutID: fmt.Sprint(k), Advantage: r.Float64()*2 - 1,
			IDs: make([]int32, n), LossMask: make([]uint8, n), Logprobs: make([]float32, n), Weights: make([]float32, n)}
		for i := range x.IDs {
			x.IDs[i] = int32(r.IntN(256))
			if i >= n/2 {
				x.LossMask[i], x.Logprobs[i], x.Weights[i] = 1, -5.5, 1.0/2048
			}
		}
		ss[k] = x
	}
	sent0, recv0 := c.WireBytes()
	busy0 := s.Busy()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := p.Step(context.Background(), ss); err != nil {
			b.Fatal(err)
		}
		if err := p.Publish(context.Background(), int64(i+2)); err != nil {
			b.Fatal(err)
		}
	}
	wall := time.Since(start)
	sent, recv := c.WireBytes()
	n := float64(b.N)
	b.ReportMetric(float64(sent-sent0)/n, "sent-B/step")
	b.ReportMetric(float64(recv-recv0)/n, "recv-B/step")
	busy := s.Busy() - busy0
	b.ReportMetric(1-float64(busy)/float64(wall), "agl-share")
	b.ReportMetric(float64(wall-busy)/n/1e6, "agl-ms/step")
}

// A server that echoes the key in its refusal does not get the key into
// agl's error.
func TestKeyNotEchoed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"detail":"bad key ` + r.Header.Get("X-API-Key") + `"}`))
	}))
	defer srv.Close()
	c, err := tinker.NewClient(srv.URL, "tml-secret-123")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tinker.New(context.Background(), c, options(tinker.LossPPO), "", 1)
	if err == nil || strings.Contains(err.Error(), "tml-secret-123") || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("error %v", err)
	}
}

// ppo_epochs makes that many rounds of forward_backward calls and
// optim_step over the same samples.
func TestEpochs(t *testing.T) {
	s := standIn(t)
	o := options(tinker.LossPPO)
	o.Epochs = 3
	p := newPolicy(t, s, o)
	const fb, opt = "/api/v1/forward_backward", "/api/v1/optim_step"
	if _, err := p.Step(context.Background(), batch(s.Snapshot(s.Models()[0]), 9)); err != nil {
		t.Fatal(err)
	}
	if s.Count(opt) != 3 || s.Count(fb)%3 != 0 || s.Count(fb) < 6 {
		t.Errorf("%d optim_steps and %d forward_backward calls for 3 epochs", s.Count(opt), s.Count(fb))
	}
}

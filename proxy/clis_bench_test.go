package proxy_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/engine/upstream"
	"github.com/aglrl/agl/internal/fastjson"
	"github.com/aglrl/agl/internal/testutil"
	"github.com/aglrl/agl/proxy"
	"github.com/aglrl/agl/store"
)

// BenchmarkCLIFirstTurn measures what the gateway adds to the first
// request of each CLI in cliFixtures (Claude Code, Codex, Gemini CLI, and
// OpenCode and Qwen Code in each API mode; the captured fixtures,
// streamed, headers included): the gateway renders the 7k-17k-token
// prompt with the Qwen3 template, calls a scripted vLLM-format upstream (/v1/completions with
// token-id prompts, a fixed "Hello." reply with log-probs), parses the
// reply, records the event in SQLite and streams the answer. The baseline
// is the same request body sent to that upstream directly, in the same run
// (alternating rounds, one client). Reported: prompt tokens, p50 of both
// and the added p50.
//
//	go test -run '^$' -bench CLIFirstTurn -benchtime 40x ./proxy
func BenchmarkCLIFirstTurn(b *testing.B) {
	for _, fx := range cliFixtures {
		b.Run(fx.cli, func(b *testing.B) { benchCLIFirstTurn(b, fx.turns[0]) })
	}
}

func benchCLIFirstTurn(b *testing.B, file string) {
	ml := qwen3ChatML(b)
	reply := ml.ReplyIDs(text("Hello."))
	// The scripted upstream: reads the request, answers the reply's ids.
	ans := []byte(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"agl-test","choices":[{"index":0,"text":"Hello.","logprobs":{"token_logprobs":[`)
	for i := range reply {
		if i > 0 {
			ans = append(ans, ',')
		}
		ans = append(ans, "-0.25"...)
	}
	ans = append(ans, `]},"finish_reason":"stop","token_ids":`...)
	ans = fastjson.AppendInt32s(ans, reply)
	ans = append(ans, `,"prompt_token_ids":`...)
	tail := []byte(`}],"usage":{"prompt_tokens":1,"completion_tokens":` + strconv.Itoa(len(reply)) + `,"total_tokens":1}}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		// Echo the prompt ids, as vLLM does with return_token_ids (the
		// direct calls, which send the CLI's body, get an empty list).
		ids := []byte("[]")
		if _, rest, ok := bytes.Cut(body, []byte(`"prompt":[`)); ok {
			if j := bytes.IndexByte(rest, ']'); j >= 0 {
				ids = append(append([]byte("["), rest[:j]...), ']')
			}
		}
		out := append(append(append(make([]byte, 0, len(ans)+len(ids)+len(tail)), ans...), ids...), tail...)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		w.Write(out)
	}))
	b.Cleanup(up.Close)
	cl, err := upstream.New(upstream.Config{Models: []upstream.Model{{Name: "agl-test", Endpoints: []string{up.URL + "/v1"}, Version: 3}}})
	if err != nil {
		b.Fatal(err)
	}
	e := &env{st: testutil.SQLite(b), tmpl: ml}
	e.p = proxy.New(proxy.Config{}, e.st, proxy.NewTokenBackend(upstream.NewTokenEngine(cl, "", 1<<16), ml, ml.Tokenizer(), 0))
	e.srv = httptest.NewServer(e.p)
	b.Cleanup(e.srv.Close)
	claim := e.claim(b, store.ModeTrain)

	f := loadCLIFixture(b, file)
	hdr := f.headers(claim.Key)
	hc := benchClient()
	call := func(url string) time.Duration {
		req, _ := http.NewRequest(f.Method, url, bytes.NewReader(f.Body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("%s: %d %v %.300s", url, resp.StatusCode, err, body)
		}
		return d
	}
	gwURL, directURL := base(e.srv, claim)+f.Path, up.URL+"/v1/completions"
	call(directURL)
	call(gwURL)
	n := max(b.N, 4)
	var dl, gl []time.Duration
	b.ResetTimer()
	const rounds = 4
	for r := range rounds {
		m := n/rounds + min(1, max(0, n%rounds-r))
		for range m {
			dl = append(dl, call(directURL))
		}
		for range m {
			gl = append(gl, call(gwURL))
		}
	}
	b.StopTimer()
	calls := e.calls(b, claim)
	prefix := "msg_"
	switch {
	case strings.Contains(f.Path, "/v1/responses"):
		prefix = "resp_"
	case strings.Contains(f.Path, "/v1beta/"):
		prefix = "gen-"
	case strings.Contains(f.Path, "/v1/chat/completions"):
		prefix = "chatcmpl-"
	}
	if len(calls) != n+1 || !strings.HasPrefix(calls[0].CallID, prefix) {
		b.Fatalf("%d events for %d gateway calls", len(calls), n+1)
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(float64(len(calls[0].PromptIDs)), "prompt-tokens")
	b.ReportMetric(us(pct(dl, 0.5)), "direct-p50-µs")
	b.ReportMetric(us(pct(gl, 0.5)), "gw-p50-µs")
	b.ReportMetric(us(pct(gl, 0.5)-pct(dl, 0.5)), "added-p50-µs")
}

package upstream

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// scoreServer answers /v1/completions with body, after checking that the
// request asks vLLM for prompt log-probs of a token-id prompt; it keeps
// the last request.
func scoreServer(t *testing.T, body []byte) (*httptest.Server, *promptLogprobsRequest) {
	var last promptLogprobsRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&last); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, &last
}

// TestPromptLogprobs reads vLLM's prompt_logprobs answer (the fixture has
// the shape of vLLM's CompletionResponseChoice.prompt_logprobs: null for
// the first token, then objects from token id to {logprob, rank,
// decoded_token}, the prompt token beside the top one, −∞ as null): each
// token's own log-prob is taken, not the top token's.
func TestPromptLogprobs(t *testing.T) {
	body, err := os.ReadFile("testdata/vllm_prompt_logprobs.json")
	if err != nil {
		t.Fatal(err)
	}
	srv, last := scoreServer(t, body)
	c, err := New(Config{Models: []Model{{Name: "teacher", Endpoints: []string{srv.URL + "/v1"}}}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ids := []int32{7, 8, 9, 10}
	lp, err := c.PromptLogprobs(context.Background(), "teacher", ids)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0, -1.25, -0.0625, math.Inf(-1)}
	for i := range want {
		if float64(lp[i]) != float64(float32(want[i])) {
			t.Fatalf("log-probs %v, want %v", lp, want)
		}
	}
	if last.Model != "teacher" || last.MaxTokens != 1 || last.PromptLogprobs < 1 || len(last.Prompt) != 4 || last.Prompt[3] != 10 {
		t.Errorf("request %+v: want the ids as the prompt, prompt_logprobs ≥ 1, max_tokens 1", *last)
	}
}

// TestPromptLogprobsRefused: an upstream that answers without prompt
// log-probs (a server that ignores the field), with too few, or without
// the prompt token's own, is an error naming the model and its endpoint.
func TestPromptLogprobsRefused(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"none", `{"id":"cmpl-1","object":"text_completion","created":1,"model":"teacher","choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":"length","prompt_logprobs":null}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`,
			"returned no prompt_logprobs"},
		{"absent", `{"choices":[{"index":0,"text":"x"}]}`, "returned no prompt_logprobs"},
		{"short", `{"choices":[{"index":0,"text":"x","prompt_logprobs":[null,{"8":{"logprob":-1}}]}]}`, "for 2 tokens of a 3-token prompt"},
		{"other token", `{"choices":[{"index":0,"text":"x","prompt_logprobs":[null,{"8":{"logprob":-1}},{"4":{"logprob":-1}}]}]}`, "no prompt log-prob for token 2 (id 9)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := scoreServer(t, []byte(tc.body))
			c, err := New(Config{Models: []Model{{Name: "teacher", Endpoints: []string{srv.URL + "/v1"}}}, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.PromptLogprobs(context.Background(), "", []int32{7, 8, 9})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "upstream teacher") || !strings.Contains(err.Error(), srv.URL) {
				t.Fatalf("err %v, want one naming the teacher, %s and %q", err, srv.URL, tc.want)
			}
		})
	}
}

package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aglrl/agl/engine/upstream"
)

// TestUpstreamScorer: an upstream teacher scores a step's sequences
// concurrently through a loopback server answering in vLLM's
// prompt_logprobs shape, each sequence's row in its place; an answer for
// any one of them without prompt log-probs fails the whole scoring.
func TestUpstreamScorer(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var req struct {
			Prompt []int32 `json:"prompt"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if req.Prompt[0] == 99 {
			w.Write([]byte(`{"choices":[{"index":0,"text":"x","prompt_logprobs":null}]}`))
			return
		}
		// log p(id) = −id/16 for every prompt token after the first.
		var b strings.Builder
		b.WriteString(`{"choices":[{"index":0,"text":"x","prompt_logprobs":[null`)
		for _, id := range req.Prompt[1:] {
			fmt.Fprintf(&b, `,{"%d":{"logprob":%g,"rank":1,"decoded_token":"t"}}`, id, -float64(id)/16)
		}
		b.WriteString(`]}]}`)
		w.Write([]byte(b.String()))
	}))
	defer srv.Close()
	pc := PolicyConfig{Kind: PolicyUpstream, Upstream: &upstream.Config{Models: []upstream.Model{{Name: "big", Endpoints: []string{srv.URL + "/v1"}}}}}
	score, err := trainOpts{}.scorer("big", pc)
	if err != nil {
		t.Fatal(err)
	}
	var seqs [][]int32
	for i := int32(0); i < 20; i++ {
		seqs = append(seqs, []int32{1, i + 2, i + 3, 2 * i})
	}
	lp, err := score(context.Background(), seqs)
	if err != nil {
		t.Fatal(err)
	}
	if len(lp) != len(seqs) || calls.Load() != int32(len(seqs)) {
		t.Fatalf("%d rows from %d calls for %d sequences", len(lp), calls.Load(), len(seqs))
	}
	for i, s := range seqs {
		for k := 1; k < len(s); k++ {
			if want := -float32(s[k]) / 16; lp[i][k] != want {
				t.Fatalf("sequence %d token %d: log-prob %v, want %v", i, k, lp[i][k], want)
			}
		}
	}
	_, err = score(context.Background(), append(seqs[:3:3], []int32{99, 1}))
	if err == nil || !strings.Contains(err.Error(), "upstream big ("+srv.URL+"/v1) returned no prompt_logprobs") {
		t.Errorf("err %v, want the teacher's missing prompt log-probs", err)
	}
}

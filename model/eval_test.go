package model

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/aglrl/agl/engine"
)

// TestEvalReplies builds held-out conversations whose replies are what the
// tiny model greedily writes (exact) or one token off it (not exact), and
// checks the counts by reply position and the teacher-forced loss against
// the engine's own log-probs of the same tokens.
func TestEvalReplies(t *testing.T) {
	e, m, w := newTestEngine(t, TypeQwen3, 4)
	d, err := m.Upload(w)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	greedy := func(prompt []int32, n int) engine.Result {
		res, err := e.Generate(ctx, prompt, engine.Sampling{Temperature: 0, MaxTokens: n})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// An example: prompt, reply 1, a user turn, reply 2; wrong[k] alters
	// reply k's last token.
	var nll float64
	var tokens int
	build := func(p []int32, wrong [2]bool) Example {
		ids := slices.Clone(p)
		mask := make([]bool, len(ids))
		for k := range 2 {
			res := greedy(ids, 5)
			reply := slices.Clone(res.IDs)
			lps := slices.Clone(res.Logprobs)
			if wrong[k] {
				reply[len(reply)-1] = (reply[len(reply)-1] + 1) % 60
				lp, _, err := m.LogProbs(ctx, d, [][]int32{append(slices.Clone(ids), reply...)})
				if err != nil {
					t.Fatal(err)
				}
				lps = lp[0][len(ids):]
			}
			for _, l := range lps {
				nll -= float64(l)
				tokens++
			}
			ids = append(ids, reply...)
			for range reply {
				mask = append(mask, true)
			}
			if k == 0 {
				ids = append(ids, 3, 4, 5) // the next user turn
				mask = append(mask, false, false, false)
			}
		}
		return Example{IDs: ids, Mask: mask}
	}
	ps := testPrompts()
	examples := []Example{
		build(ps[0], [2]bool{false, false}),
		build(ps[1], [2]bool{true, false}),
		build(ps[2], [2]bool{false, true}),
		{IDs: []int32{1, 2, 3}, Mask: []bool{false, false, false}}, // no reply: not counted
	}
	r, err := EvalReplies(ctx, e, examples, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Conversations != 3 || !slices.Equal(r.Replies, []int{3, 3}) || !slices.Equal(r.Exact, []int{2, 2}) {
		t.Errorf("conversations %d, exact %v of %v; want 3, [2 2] of [3 3]", r.Conversations, r.Exact, r.Replies)
	}
	if ex, n := r.ExactTotal(); ex != 4 || n != 6 {
		t.Errorf("ExactTotal %d of %d, want 4 of 6", ex, n)
	}
	if r.Tokens != tokens || math.Abs(r.Loss-nll/float64(tokens)) > 1e-4 {
		t.Errorf("loss %.6f over %d tokens, want %.6f over %d", r.Loss, r.Tokens, nll/float64(tokens), tokens)
	}

	for _, bad := range [][]Example{
		{{IDs: []int32{1, 2}, Mask: []bool{false, false}}},
		{{IDs: []int32{1, 2}, Mask: []bool{false}}},
	} {
		if _, err := EvalReplies(ctx, e, bad, nil); err == nil {
			t.Errorf("EvalReplies(%v): no error", bad)
		}
	}
}

package model

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/aglrl/agl/engine"
)

// ReplyEval is how a model does on held-out conversations: the
// cross-entropy of their replies under teacher forcing, and how many of
// them greedy decoding writes exactly, by the reply's position in its
// conversation (the first reply, the second, …).
type ReplyEval struct {
	Conversations int
	// Tokens is the number of reply tokens (each reply and its end of turn).
	Tokens int
	// Loss is the mean cross-entropy per reply token.
	Loss float64
	// Exact[k] of Replies[k] k-th replies are what greedy decoding writes
	// when given the conversation before them.
	Exact, Replies []int
}

// ExactTotal sums Exact and Replies over the positions.
func (r ReplyEval) ExactTotal() (exact, replies int) {
	for k := range r.Replies {
		exact += r.Exact[k]
		replies += r.Replies[k]
	}
	return exact, replies
}

// span is one reply: ids[start:end] (its tokens and end of turn).
type span struct{ ex, k, start, end int }

// EvalReplies evaluates the engine's current weights on examples (their
// Mask marking the replies, as for SFT): each reply is generated greedily
// from the tokens before it, at most its own length, stopping at stop, and
// counted exact when the ids are equal. Generations run concurrently (the
// engine batches them).
func EvalReplies(ctx context.Context, e *Engine, examples []Example, stop []int32) (ReplyEval, error) {
	var r ReplyEval
	var spans []span
	for i, ex := range examples {
		if len(ex.IDs) != len(ex.Mask) {
			return r, fmt.Errorf("model: eval: example %d has %d ids and %d mask values", i+1, len(ex.IDs), len(ex.Mask))
		}
		k := 0
		for t := 1; t < len(ex.Mask); t++ {
			if !ex.Mask[t] || ex.Mask[t-1] {
				continue
			}
			end := t
			for end < len(ex.Mask) && ex.Mask[end] {
				end++
			}
			spans = append(spans, span{i, k, t, end})
			k++
		}
		if k > 0 {
			r.Conversations++
		}
		for len(r.Replies) < k {
			r.Replies, r.Exact = append(r.Replies, 0), append(r.Exact, 0)
		}
	}
	if len(spans) == 0 {
		return r, errors.New("model: eval: no example has a reply")
	}

	// Teacher-forced loss, a few sequences at a time.
	e.mu.Lock()
	w := e.cur.w
	e.mu.Unlock()
	var nll float64
	const chunk = 8
	for i := 0; i < len(examples); i += chunk {
		var seqs [][]int32
		for _, ex := range examples[i:min(i+chunk, len(examples))] {
			seqs = append(seqs, ex.IDs)
		}
		lp, _, err := e.m.LogProbs(ctx, w, seqs)
		if err != nil {
			return r, fmt.Errorf("model: eval: %w", err)
		}
		for j, ex := range examples[i:min(i+chunk, len(examples))] {
			for t := 1; t < len(ex.IDs); t++ {
				if ex.Mask[t] {
					nll -= float64(lp[j][t])
					r.Tokens++
				}
			}
		}
	}
	r.Loss = nll / float64(max(r.Tokens, 1))

	// Greedy decoding of every reply.
	exact := make([]bool, len(spans))
	errs := make([]error, len(spans))
	sem := make(chan struct{}, max(e.opts.MaxBatch, 1))
	var wg sync.WaitGroup
	for i, s := range spans {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ids := examples[s.ex].IDs
			res, err := e.Generate(ctx, ids[:s.start], engine.Sampling{Temperature: 0, MaxTokens: s.end - s.start, StopIDs: stop})
			if err != nil {
				errs[i] = fmt.Errorf("model: eval: example %d reply %d: %w", s.ex+1, s.k+1, err)
				return
			}
			exact[i] = slices.Equal(res.IDs, ids[s.start:s.end])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	for i, s := range spans {
		if exact[i] {
			r.Exact[s.k]++
		}
		r.Replies[s.k]++
	}
	return r, nil
}

package samples

import (
	"slices"
	"strings"
	"testing"

	"github.com/aglrl/agl/api"
)

func call(id string, ver int64, prompt, resp []int32) api.ModelCall {
	lp := make([]float32, len(resp))
	for i := range lp {
		lp[i] = -0.5 - float32(i)/10
	}
	return api.ModelCall{CallID: id, ModelVersion: ver, PromptIDs: prompt, ResponseIDs: resp, ResponseLogprobs: lp, Continued: true}
}

func cat(xs ...[]int32) []int32 {
	var out []int32
	for _, x := range xs {
		out = append(out, x...)
	}
	return out
}

func TestBuildMergeHandCase(t *testing.T) {
	p1, r1 := []int32{1, 2, 3}, []int32{4, 5}
	gap, r2 := []int32{6, 7}, []int32{8}
	calls := []api.ModelCall{call("a", 1, p1, r1), call("b", 1, cat(p1, r1, gap), r2)}
	ss, excl := Build(BuildConfig{}, "r", "g", "att", calls)
	if len(ss) != 1 || len(excl) != 0 {
		t.Fatalf("got %d samples %d excluded", len(ss), len(excl))
	}
	s := ss[0]
	if want := []int32{1, 2, 3, 4, 5, 6, 7, 8}; !slices.Equal(s.IDs, want) {
		t.Errorf("ids %v want %v", s.IDs, want)
	}
	if want := []uint8{0, 0, 0, 1, 1, 0, 0, 1}; !slices.Equal(s.LossMask, want) {
		t.Errorf("mask %v want %v", s.LossMask, want)
	}
	if want := []float32{0, 0, 0, -0.5, -0.6, 0, 0, -0.5}; !slices.Equal(s.Logprobs, want) {
		t.Errorf("logprobs %v want %v", s.Logprobs, want)
	}
	if !slices.Equal(s.CallIDs, []string{"a", "b"}) || s.Split.Reason != SplitFirst || s.RolloutID != "r" || s.GroupID != "g" || s.AttemptID != "att" {
		t.Errorf("sample meta %+v", s)
	}
}

// Mismatch cases start a new sample and are classified.
func TestBuildSplitClassification(t *testing.T) {
	p1, r1 := []int32{1, 2, 3}, []int32{4, 5}
	ext := cat(p1, r1, []int32{6})
	edited := []int32{1, 2, 99, 4, 5, 6}
	rerendered := call("b", 1, edited, []int32{7})
	rerendered.Continued, rerendered.RenderReason = false, "history_rewritten"
	noIDs := api.ModelCall{CallID: "x", NoTokenIDs: true, ModelVersion: 1}
	tests := []struct {
		name      string
		cfg       BuildConfig
		calls     []api.ModelCall
		reasons   []SplitReason // per sample
		at        []int
		excluded  []string // reasons
		detailHas string
	}{
		{"extends → merge", BuildConfig{}, []api.ModelCall{call("a", 1, p1, r1), call("b", 1, ext, []int32{7})}, []SplitReason{SplitFirst}, []int{-1}, nil, ""},
		{"edited history → mismatch at 2", BuildConfig{}, []api.ModelCall{call("a", 1, p1, r1), call("b", 1, edited, []int32{7})}, []SplitReason{SplitFirst, SplitMismatch}, []int{-1, 2}, nil, "prompt[2]=99, sample[2]=3"},
		{"re-rendered with reason", BuildConfig{}, []api.ModelCall{call("a", 1, p1, r1), rerendered}, []SplitReason{SplitFirst, SplitRerendered}, []int{-1, 2}, nil, "history_rewritten"},
		{"truncated context", BuildConfig{}, []api.ModelCall{call("a", 1, p1, r1), call("b", 1, []int32{1, 2}, []int32{7})}, []SplitReason{SplitFirst, SplitTruncated}, []int{-1, 2}, nil, "strict prefix"},
		{"version change on exact prefix", BuildConfig{}, []api.ModelCall{call("a", 1, p1, r1), call("b", 2, ext, []int32{7})}, []SplitReason{SplitFirst, SplitModelVersion}, []int{-1, -1}, nil, "version 2 after 1"},
		{"version change with mismatch", BuildConfig{}, []api.ModelCall{call("a", 1, p1, r1), call("b", 2, edited, []int32{7})}, []SplitReason{SplitFirst, SplitModelVersion}, []int{-1, 2}, nil, "version 2 after 1"},
		{"merge across versions", BuildConfig{MergeAcrossVersions: true}, []api.ModelCall{call("a", 1, p1, r1), call("b", 2, ext, []int32{7})}, []SplitReason{SplitFirst}, []int{-1}, nil, ""},
		{"merge off", BuildConfig{NoMerge: true}, []api.ModelCall{call("a", 1, p1, r1), call("b", 1, ext, []int32{7})}, []SplitReason{SplitFirst, SplitMergeOff}, []int{-1, -1}, nil, ""},
		{"no token ids excluded, next still merges", BuildConfig{}, []api.ModelCall{call("a", 1, p1, r1), noIDs, call("b", 1, ext, []int32{7})}, []SplitReason{SplitFirst}, []int{-1}, []string{"no_token_ids"}, ""},
		{"no token ids then mismatch", BuildConfig{}, []api.ModelCall{call("a", 1, p1, r1), noIDs, call("b", 1, edited, []int32{7})}, []SplitReason{SplitFirst, SplitAfterExcluded}, []int{-1, 2}, []string{"no_token_ids"}, ""},
		{"logprobs missing excluded", BuildConfig{}, []api.ModelCall{{CallID: "a", PromptIDs: p1, ResponseIDs: r1}}, nil, nil, []string{"logprobs_mismatch"}, ""},
		{"empty prompt excluded", BuildConfig{}, []api.ModelCall{call("a", 1, nil, r1)}, nil, nil, []string{"empty_prompt"}, ""},
		{"prompt too long excluded", BuildConfig{MaxPromptLen: 2}, []api.ModelCall{call("a", 1, p1, r1)}, nil, nil, []string{"prompt_too_long"}, ""},
		{"response too long dropped", BuildConfig{MaxResponseLen: 1, Rule: LengthDrop}, []api.ModelCall{call("a", 1, p1, r1), call("b", 1, ext, []int32{7})}, []SplitReason{SplitFirst}, []int{-1}, []string{"response_too_long"}, ""},
		{"response truncated closes sample", BuildConfig{MaxResponseLen: 1}, []api.ModelCall{call("a", 1, p1, r1), call("b", 1, ext, []int32{7})}, []SplitReason{SplitFirst, SplitTruncated}, []int{-1, -1}, nil, "truncated"},
		{"empty response extended later merges", BuildConfig{}, []api.ModelCall{call("a", 1, p1, nil), call("b", 1, cat(p1, []int32{9}), []int32{7})}, []SplitReason{SplitFirst}, []int{-1}, nil, ""},
		{"empty response alone excluded", BuildConfig{}, []api.ModelCall{call("a", 1, p1, r1), call("b", 1, []int32{8}, nil)}, []SplitReason{SplitFirst}, []int{-1}, []string{"no_trained_tokens"}, ""},
		{"max seq len truncates", BuildConfig{MaxSeqLen: 4}, []api.ModelCall{call("a", 1, p1, r1)}, []SplitReason{SplitFirst}, []int{-1}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ss, excl := Build(tc.cfg, "r", "g", "a", tc.calls)
			var got []SplitReason
			var at []int
			details := ""
			for _, s := range ss {
				got = append(got, s.Split.Reason)
				at = append(at, s.Split.At)
				details += s.Split.Detail + "|"
			}
			if !slices.Equal(got, tc.reasons) || !slices.Equal(at, tc.at) {
				t.Fatalf("splits %v at %v, want %v at %v (details %s)", got, at, tc.reasons, tc.at, details)
			}
			var er []string
			for _, e := range excl {
				er = append(er, e.Reason)
			}
			if !slices.Equal(er, tc.excluded) {
				t.Fatalf("excluded %v, want %v", er, tc.excluded)
			}
			if !strings.Contains(details, tc.detailHas) {
				t.Fatalf("details %q lack %q", details, tc.detailHas)
			}
			checkInvariants(t, tc.cfg, tc.calls, ss, excl)
		})
	}
}

func TestBuildTruncationAccounting(t *testing.T) {
	ss, _ := Build(BuildConfig{MaxSeqLen: 4}, "r", "g", "a", []api.ModelCall{call("a", 1, []int32{1, 2, 3}, []int32{4, 5, 6})})
	s := ss[0]
	if !slices.Equal(s.IDs, []int32{1, 2, 3, 4}) || !slices.Equal(s.LossMask, []uint8{0, 0, 0, 1}) || !s.Truncated || s.TruncatedTokens != 2 {
		t.Fatalf("got %+v", s)
	}
}

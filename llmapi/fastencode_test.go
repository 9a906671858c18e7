package llmapi

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// randResponse builds a ChatResponse from a seed and some strings, covering
// every field's present/absent/empty cases.
func randResponse(seed uint64, s1, s2, s3 string) *ChatResponse {
	rng := rand.New(rand.NewPCG(seed, 7))
	str := func() string { return []string{"", s1, s2, s3, "<&>\u2028", "a\"b\\c\n"}[rng.IntN(6)] }
	strp := func() *string {
		if rng.IntN(3) == 0 {
			return nil
		}
		v := str()
		return &v
	}
	calls := func() []ChatToolCall {
		var out []ChatToolCall
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			return []ChatToolCall{}
		}
		for range 1 + rng.IntN(3) {
			var tc ChatToolCall
			if rng.IntN(2) == 0 {
				i := rng.IntN(5)
				tc.Index = &i
			}
			tc.ID, tc.Type, tc.Function.Name, tc.Function.Arguments = str(), str(), str(), str()
			out = append(out, tc)
		}
		return out
	}
	r := &ChatResponse{ID: str(), Object: str(), Created: rng.Int64N(1 << 40), Model: str()}
	if rng.IntN(4) > 0 {
		r.Choices = []ChatChoice{}
		for range rng.IntN(3) {
			c := ChatChoice{Index: rng.IntN(3), Text: strp(), FinishReason: strp()}
			if rng.IntN(2) == 0 {
				c.Logprobs = &struct{}{}
			}
			if rng.IntN(2) == 0 {
				c.Message = &ChatReply{Role: str(), Content: strp(), ReasoningContent: str(), ToolCalls: calls()}
			}
			if rng.IntN(2) == 0 {
				c.Delta = &ChatDelta{Role: str(), Content: strp(), ReasoningContent: str(), ToolCalls: calls()}
			}
			r.Choices = append(r.Choices, c)
		}
	}
	if rng.IntN(2) == 0 {
		r.Usage = &ChatUsage{PromptTokens: rng.IntN(100), CompletionTokens: rng.IntN(100), TotalTokens: rng.IntN(200)}
	}
	return r
}

// FuzzAppendCCResponse: AppendChatResponse writes what json.Marshal writes.
func FuzzAppendCCResponse(f *testing.F) {
	f.Add(uint64(1), "hello", "call_1", `{"x":1}`)
	f.Add(uint64(2), "", "\xff", "caf\u00e9")
	f.Fuzz(func(t *testing.T, seed uint64, s1, s2, s3 string) {
		r := randResponse(seed, s1, s2, s3)
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendChatResponse(nil, r); string(got) != string(want) {
			t.Fatalf("\ngot  %s\nwant %s", got, want)
		}
	})
}

func TestAppendCCResponse(t *testing.T) {
	for seed := range uint64(3000) {
		r := randResponse(seed, "x", "tool", "{}")
		want, _ := json.Marshal(r)
		if got := AppendChatResponse(nil, r); string(got) != string(want) {
			t.Fatalf("seed %d:\ngot  %s\nwant %s", seed, got, want)
		}
	}
}

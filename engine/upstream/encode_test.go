package upstream

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

func randRequest(seed uint64, s1, s2, raw string) *wireRequest {
	rng := rand.New(rand.NewPCG(seed, 3))
	str := func() string { return []string{"", s1, s2, "<&>\u2028", "a\"b\\c\n"}[rng.IntN(5)] }
	w := &wireRequest{Model: str(), Temperature: []float32{0, 1, 0.7, 1e-7, 2.5e21}[rng.IntN(5)], TopK: rng.IntN(3), MaxTokens: rng.IntN(3) * 100,
		ReturnTokenIDs: rng.IntN(2) == 0, Stream: rng.IntN(2) == 0}
	if rng.IntN(2) == 0 {
		w.TopP = 0.9
	}
	switch rng.IntN(4) {
	case 0:
		w.Logprobs = true
	case 1:
		w.Logprobs = 0
	case 2:
		w.Logprobs = false
	}
	switch rng.IntN(4) {
	case 0:
		w.Prompt = str()
	case 1:
		w.Prompt = []int32{1, 2, 3}
	case 2:
		w.Prompt = []int32(nil)
	}
	if rng.IntN(2) == 0 {
		s := uint64(rng.Int64())
		w.Seed = &s
	}
	if rng.IntN(2) == 0 {
		w.Stop = []string{str(), str()}
	}
	if rng.IntN(2) == 0 {
		w.StopTokenIDs = []int32{7, -1}
	}
	for range rng.IntN(3) {
		m := wireMessage{Role: str(), ToolCallID: str(), Name: str()}
		if rng.IntN(3) > 0 {
			c := str()
			m.Content = &c
		}
		for range rng.IntN(2) {
			tc := wireToolCall{ID: str(), Type: "function"}
			tc.Function.Name, tc.Function.Arguments = str(), str()
			m.ToolCalls = append(m.ToolCalls, tc)
		}
		w.Messages = append(w.Messages, m)
	}
	for range rng.IntN(3) {
		t := wireTool{Type: "function", Function: wireFunction{Name: str(), Description: str()}}
		if rng.IntN(3) > 0 {
			t.Function.Parameters = json.RawMessage(raw)
		}
		if rng.IntN(4) == 0 {
			a := str()
			t.Function.Arguments = &a
		}
		w.Tools = append(w.Tools, t)
	}
	return w
}

// FuzzEncodeRequest: encodeRequest writes what json.Marshal writes (a
// prompt of ids included), or fails where json.Marshal fails.
func FuzzEncodeRequest(f *testing.F) {
	f.Add(uint64(1), "hi", "call_1", `{"type":"object","properties":{"path":{"type":"string"}}}`)
	f.Add(uint64(2), "\xff", "caf\u00e9", "{ \"a\" : [1, 2], \"b\": \"<x>\" }")
	f.Add(uint64(3), "", "", `{nope`)
	f.Fuzz(func(t *testing.T, seed uint64, s1, s2, raw string) { checkRequest(t, randRequest(seed, s1, s2, raw)) })
}

func checkRequest(t *testing.T, w *wireRequest) {
	t.Helper()
	want, werr := json.Marshal(w)
	got, err := encodeRequest(w)
	if (err != nil) != (werr != nil) {
		t.Fatalf("encodeRequest error %v, json.Marshal's %v", err, werr)
	}
	if string(got) != string(want) {
		t.Fatalf("\ngot  %s\nwant %s", got, want)
	}
}

func TestEncodeRequest(t *testing.T) {
	for seed := range uint64(3000) {
		checkRequest(t, randRequest(seed, "x", "tool", `{"type": "object"}`))
	}
	checkRequest(t, &wireRequest{Temperature: float32(math.NaN())})
	checkRequest(t, &wireRequest{Model: "m<&>", Prompt: []int32{1, -2, 2147483647}})
	checkRequest(t, &wireRequest{Model: "m", Prompt: []int32{}})
	checkRequest(t, &wireRequest{Model: "m", Prompt: []int32(nil), Temperature: float32(math.Inf(1))})
}

// BenchmarkEncodeRequest: a token-mode request of a long conversation's
// prompt (200k ids), beside encoding/json writing the same ([]int32 by
// reflection) as the baseline.
func BenchmarkEncodeRequest(b *testing.B) {
	ids := make([]int32, 200000)
	for i := range ids {
		ids[i] = int32(i*7919) % 151000
	}
	w := &wireRequest{Model: "Qwen/Qwen3-8B", Prompt: ids, Temperature: 1, MaxTokens: 512, Logprobs: 0, ReturnTokenIDs: true}
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, err := encodeRequest(w); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(w); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package proxy

import (
	"testing"

	"github.com/aglrl/agl/chat"
	"github.com/aglrl/agl/engine"
	"github.com/aglrl/agl/store"
)

var hotBody = []byte(`{"model":"Qwen/Qwen3-8B","messages":[{"role":"system","content":"You are a helpful coding agent. Use the tools to inspect the repository before answering."},` +
	`{"role":"user","content":"Find the function that parses the config file and explain what happens when the file is missing."}],` +
	`"tools":[{"type":"function","function":{"name":"read_file","description":"Read a file of the repository","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}],` +
	`"temperature":1.0,"max_tokens":512}`)

// BenchmarkHotPath times the gateway's own per-call work, without HTTP or
// the store: decode a Chat Completions request, encode the answer and the
// model_request event, and the event's stored form (store/codec.go:
// what the stored-bytes bounds measure and the store reuses) against the
// agent's previous call, as for every call of an attempt but its first.
func BenchmarkHotPath(b *testing.B) {
	p := New(Config{}, nil, nil)
	res := &Result{Message: chat.Message{Role: "assistant", Content: "Hello there, this is a reply of moderate length."},
		PromptIDs: make([]int32, 60), ResponseIDs: make([]int32, 12), Logprobs: make([]float32, 12),
		FinishReason: engine.FinishStop, Model: "m", ModelVersion: 1, PromptTokens: 60, CompletionTokens: 12}
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			c := &call{shape: shapeChat, body: hotBody, mode: store.ModeTrain}
			if e := decodeChat(p, c); e != nil {
				b.Fatal(e)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		c := &call{shape: shapeChat, body: hotBody, mode: store.ModeTrain, id: "chatcmpl-x", res: res}
		decodeChat(p, c)
		for b.Loop() {
			resp, err := encodeChat(p, c)
			if err != nil {
				b.Fatal(err)
			}
			_ = c.eventData(resp, nil)
		}
	})
	b.Run("stored", func(b *testing.B) {
		c := &call{shape: shapeChat, body: hotBody, mode: store.ModeTrain, id: "chatcmpl-x", res: res}
		decodeChat(p, c)
		resp, err := encodeChat(p, c)
		if err != nil {
			b.Fatal(err)
		}
		lay := new(store.CallLayout)
		ev := store.NewEvent{Type: store.EventModelRequest, Data: c.eventData(resp, lay), DataValid: true, Layout: lay}
		bases := store.NewBases(1 << 20)
		prev := bases.Batch()
		prev.Stored("r", "a", prev.Encode("r", "a", ev), 1)
		prev.Commit()
		var enc store.Encoding
		for b.Loop() {
			enc = bases.Batch().Encode("r", "a", ev)
		}
		b.ReportMetric(float64(len(ev.Data)), "event-bytes")
		b.ReportMetric(float64(len(enc.Data)), "stored-bytes")
		if !store.Encoded(enc.Data) || store.BaseSeq(enc.Data) != 1 {
			b.Fatalf("stored form (encoded: %v, base %d) not encoded against the previous call (1)", store.Encoded(enc.Data), store.BaseSeq(enc.Data))
		}
	})
}

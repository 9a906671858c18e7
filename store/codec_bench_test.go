package store_test

import (
	"testing"

	"github.com/aglrl/agl/store"
	"github.com/aglrl/agl/store/storetest"
)

// BenchmarkEncodeEvent encodes the 100th call of a long-horizon rollout
// (8 KB tool results) against the 99th, beside encoding/json's validation
// of the same bytes (what the store did per event before) as a baseline:
//
//	go test -run '^$' -bench EncodeEvent ./store/
func BenchmarkEncodeEvent(b *testing.B) {
	calls, _ := storetest.Conversation([]string{""}, 100, 8192)
	prev, last := calls[98], calls[99]
	base, _, _ := store.BaseOf(prev)
	base.Seq = 99
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(last)))
		for b.Loop() {
			store.EncodeEvent(last, base)
		}
	})
	stored, _, _ := store.EncodeEvent(last, base)
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(last)))
		for b.Loop() {
			if _, err := store.DecodeEvent(stored, base); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("base", func(b *testing.B) {
		b.SetBytes(int64(len(last)))
		for b.Loop() {
			store.BaseOf(last)
		}
	})
	b.Logf("event %d bytes, stored %d", len(last), len(stored))
}

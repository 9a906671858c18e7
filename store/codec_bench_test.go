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

// BenchmarkEncodeReused: the store's encoding of the same 100th call on
// the gateway's path, where the call carries the gateway's own encoding
// of it (NewEvent.Encoded, its stored-size measure) against the same
// 99th call, beside encoding it again:
//
//	go test -run '^$' -bench EncodeReused ./store/
func BenchmarkEncodeReused(b *testing.B) {
	calls, _ := storetest.Conversation([]string{""}, 100, 8192)
	ev := func(i int) store.NewEvent {
		// With its layout, as the gateway gives it: no scan.
		return store.NewEvent{Type: store.EventModelRequest, Data: calls[i], DataValid: true, Layout: store.LayoutOf(calls[i])}
	}
	withBase := func(seq int64) *store.Bases {
		c := store.NewBases(store.DefaultBasesBytes)
		eb := c.Batch()
		eb.Stored("r", "a", eb.Encode("r", "a", ev(98)), seq)
		eb.Commit()
		return c
	}
	gateway, st := withBase(1099), withBase(99)
	enc := gateway.Batch().Encode("r", "a", ev(99))
	for _, reuse := range []bool{false, true} {
		e := ev(99)
		if reuse {
			e.Encoded = &enc
		}
		b.Run(map[bool]string{false: "encode-again", true: "reuse"}[reuse], func(b *testing.B) {
			b.SetBytes(int64(len(e.Data)))
			for b.Loop() {
				st.Batch().Encode("r", "a", e)
			}
		})
	}
}

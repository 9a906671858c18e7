package store

import (
	"bytes"
	"testing"
)

// FuzzDecodeEvent: a damaged stored form (a bit flipped on disk, a row cut
// short, bytes an attacker wrote) decodes to an error, never a panic or a
// runaway allocation; an intact one decodes to exactly the JSON it was
// encoded from.
func FuzzDecodeEvent(f *testing.F) {
	p := []int32{1, 2, 3}
	baseJSON := callJSON("", p, p, 3, "")
	next := callJSON("", append(p, p...), p, 4, "")
	base, _, _ := BaseOf(baseJSON)
	base.Seq = 4
	stored, _, _ := EncodeEvent(next, base)
	f.Add(stored, true)
	f.Add(stored[:len(stored)/2], true)
	f.Add([]byte{0, 'E', 1, 0, 4, 0xff, 0xff}, false)
	f.Add([]byte(`{"a":1}`), false)
	f.Fuzz(func(t *testing.T, b []byte, withBase bool) {
		var bb *CallBase
		if withBase {
			bb = base
		}
		out, err := DecodeEvent(b, bb)
		if err == nil && bytes.Equal(b, stored) && withBase && !bytes.Equal(out, next) {
			t.Fatalf("intact row decoded to %q, want %q", out, next)
		}
	})
}

// FuzzEncodeEvent: whatever an event's data holds, it is stored either as
// is or in a form that reads back as exactly that data.
func FuzzEncodeEvent(f *testing.F) {
	for _, ev := range goldenEvents() {
		f.Add(ev)
	}
	p := []int32{1, 2, 3}
	base, _, _ := BaseOf(callJSON("", p, p, 3, ""))
	base.Seq = 4
	f.Fuzz(func(t *testing.T, data []byte) {
		if Encoded(data) { // not JSON: never given to the encoder
			return
		}
		stored, _, _ := EncodeEvent(data, base)
		out, err := DecodeEvent(stored, base)
		if err != nil || !bytes.Equal(out, data) {
			t.Fatalf("%q stored as %q reads back as %q (%v)", data, stored, out, err)
		}
	})
}

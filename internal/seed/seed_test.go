package seed

import (
	"encoding/json"
	"testing"
)

func TestMix(t *testing.T) {
	seen := map[uint64][]uint64{}
	for a := uint64(0); a < 4; a++ {
		for b := uint64(0); b < 4; b++ {
			for c := uint64(0); c < 4; c++ {
				s := Mix(a, b, c)
				if s == 0 {
					t.Fatalf("Mix(%d,%d,%d) = 0", a, b, c)
				}
				if s != Mix(a, b, c) {
					t.Fatalf("Mix(%d,%d,%d) not deterministic", a, b, c)
				}
				if prev, ok := seen[s]; ok {
					t.Fatalf("Mix(%d,%d,%d) = Mix(%v)", a, b, c, prev)
				}
				seen[s] = []uint64{a, b, c}
			}
		}
	}
	if Mix(1, 2) == Mix(2, 1) {
		t.Error("Mix ignores the order of its parts")
	}
	if String("writer") == String("rewriter") {
		t.Error("String collides on two agent names")
	}
}

func TestFromMetadata(t *testing.T) {
	for _, tc := range []struct {
		md   string
		want uint64
	}{
		{``, 0},
		{`{"step":3}`, 0},
		{`{"step":3,"seed":18446744073709551615}`, 18446744073709551615},
		{`{"seed":-1}`, 0},
		{`{"seed":"12"}`, 0},
		{`not json`, 0},
		{`{"seed":42}`, 42},
	} {
		if got := FromMetadata(json.RawMessage(tc.md)); got != tc.want {
			t.Errorf("FromMetadata(%q) = %d, want %d", tc.md, got, tc.want)
		}
	}
}

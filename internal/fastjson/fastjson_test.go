package fastjson

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// toAny decodes one value into what encoding/json's Unmarshal into an
// any yields (maps, slices, float64, string, bool, nil).
func toAny(s *Scanner, depth int) (any, bool) {
	if depth > maxDepth {
		return nil, false
	}
	switch s.peek() {
	case '{':
		o, _ := s.Object()
		m := map[string]any{}
		for {
			k, more := o.next(true)
			if !more {
				return m, o.ok
			}
			v, ok := toAny(s, depth+1)
			if !ok {
				return nil, false
			}
			m[string(k)] = v
		}
	case '[':
		a, _ := s.Array()
		out := []any{}
		for a.Next() {
			v, ok := toAny(s, depth+1)
			if !ok {
				return nil, false
			}
			out = append(out, v)
		}
		return out, a.OK()
	case '"':
		return s.String()
	case 't', 'f':
		return s.Bool()
	case 'n':
		return nil, s.Null()
	}
	return s.Float(64)
}

func decodeAny(data []byte) (any, bool) {
	s := New(data)
	v, ok := toAny(s, 0)
	return v, ok && s.End()
}

var seeds = []string{
	`{"a":1,"b":[true,false,null],"c":{"d":"e\n\"\\\/\b\f\r\t\u00e9\ud83d\ude00"},"n":-1.5e-3}`,
	`[1, 2 , 3 ]`, `"plain"`, `"caf\u00e9 ☕"`, `0`, `-0`, `1e400`, `01`, `1.`, `.5`, `"\ud800"`, `"\udc00\ud800"`,
	`{"a":1,}`, `[1,]`, `{"a" 1}`, `"tab	in"`, "\"\xff\"", `{"a":{"b":{"c":[[[]]]}}}`, ` null `, `nul`, `{"a":1}x`,
	`"\u0000"`, `"\x"`, `{"":""}`, `{"k":1,"k":2}`, `[1e5, -2E-2, 3.25]`,
}

// FuzzScanner: whatever the scanner accepts, encoding/json accepts and
// decodes to the same value.
func FuzzScanner(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := decodeAny(data)
		if !ok {
			return
		}
		var want any
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("fastjson accepted %q, encoding/json: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: fastjson %#v, encoding/json %#v", data, got, want)
		}
	})
}

func TestScannerSeeds(t *testing.T) {
	accepted := 0
	for _, s := range seeds {
		got, ok := decodeAny([]byte(s))
		var want any
		err := json.Unmarshal([]byte(s), &want)
		if ok {
			accepted++
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%q: fastjson %#v, encoding/json %#v (%v)", s, got, want, err)
			}
		}
	}
	if accepted < 10 {
		t.Errorf("only %d seeds accepted", accepted)
	}
}

func TestKeys(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		ok   bool
	}{
		{`{"a":1,"b":2,"x":{"y":[1]}}`, []int{0, 1}, true},
		{`{"b":2}`, []int{1}, true},
		{`{"A":1}`, nil, false},            // encoding/json folds case: not ours
		{`{"a":1,"a":2}`, []int{0}, false}, // repeated
		{`{}`, nil, true},
	} {
		s := New([]byte(tc.in))
		o, _ := s.Object()
		var got []int
		for {
			k := o.Keys("a", "b")
			if k < 0 {
				break
			}
			got = append(got, k)
			s.Skip()
		}
		if o.OK() != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: keys %v ok %v, want %v %v", tc.in, got, o.OK(), tc.want, tc.ok)
		}
	}
}

// FuzzAppendString: AppendString writes what json.Marshal writes.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "<a href=\"x\">&amp;</a>", "tab\tnl\ncr\r\x00\x1f", "\u2028\u2029", "\xff\xfeok", "café ☕ 😀", "\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: %s, want %s", s, got, want)
		}
	})
}

// TestDeepNesting: Skip accepts the nesting encoding/json does (10000
// levels), no deeper.
func TestDeepNesting(t *testing.T) {
	for _, n := range []int{maxDepth, maxDepth + 1, maxDepth + 2, maxDepth + 10} {
		deep := []byte(strings.Repeat("[", n) + strings.Repeat("]", n))
		if got, want := New(deep).Skip(), json.Valid(deep); got != want || n > maxDepth+1 && got {
			t.Errorf("%d levels: Skip %v, json.Valid %v", n, got, want)
		}
	}
}

func TestAppendInt32sMatchesEncodingJSON(t *testing.T) {
	for _, ids := range [][]int32{nil, {}, {0}, {1, -2, 2147483647, -2147483648}} {
		want, _ := json.Marshal(ids)
		if got := AppendInt32s([]byte("x"), ids); string(got) != "x"+string(want) {
			t.Errorf("%v: got %s, want x%s", ids, got, want)
		}
	}
}

func TestInt32sFloat32sMatchEncodingJSON(t *testing.T) {
	for _, in := range []string{`null`, `[]`, ` [ 1 , -2 ] `, `[2147483647,-2147483648]`, `[2147483648]`, `[1.5]`, `[1e2]`, `[null]`, `[01]`, `[1,]`, `{}`, `["1"]`} {
		var wi []int32
		ierr := json.Unmarshal([]byte(in), &wi)
		gi, ok := New([]byte(in)).Int32s()
		if ok && (ierr != nil || !reflect.DeepEqual(gi, wi)) {
			t.Errorf("Int32s(%s) = %v, encoding/json %v %v", in, gi, wi, ierr)
		}
		var wf []float32
		ferr := json.Unmarshal([]byte(in), &wf)
		gf, ok := New([]byte(in)).Float32s()
		if ok && (ferr != nil || !reflect.DeepEqual(gf, wf)) {
			t.Errorf("Float32s(%s) = %v, encoding/json %v %v", in, gf, wf, ferr)
		}
	}
	// The common shapes take the fast path.
	if v, ok := New([]byte(`[1,-2]`)).Int32s(); !ok || len(v) != 2 {
		t.Errorf("Int32s([1,-2]) = %v, %v", v, ok)
	}
	if v, ok := New([]byte(`[-0.5,1e-3]`)).Float32s(); !ok || len(v) != 2 {
		t.Errorf("Float32s = %v, %v", v, ok)
	}
}

// checkInt32sText: whatever Int32sText accepts, json.Unmarshal reads as an
// []int32 that AppendInt32s writes back to the same bytes, with as many
// elements as it said; what it refuses leaves the scanner where it was.
func checkInt32sText(t *testing.T, in string) bool {
	s := New([]byte(in))
	text, n, ok := s.Int32sText()
	if !ok {
		if s.pos != 0 {
			t.Errorf("Int32sText(%q) refused but moved to %d", in, s.pos)
		}
		return false
	}
	var ids []int32
	if err := json.Unmarshal(text, &ids); err != nil {
		t.Fatalf("Int32sText accepted %q, encoding/json: %v", text, err)
	}
	if got := AppendInt32s(nil, ids); string(got) != string(text) || len(ids) != n {
		t.Fatalf("Int32sText(%q) = %q (%d ids), written back %q (%d)", in, text, n, got, len(ids))
	}
	return true
}

func TestInt32sText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{`[]`, true}, {`[0]`, true}, {`[1,-2,3]`, true}, {` [7]`, true}, {`[2147483647,-2147483648]`, true}, {`[1]x`, true},
		{`null`, false}, {`[ 1]`, false}, {`[1 ]`, false}, {`[1, 2]`, false}, {`[01]`, false}, {`[-0]`, false}, {`[2147483648]`, false},
		{`[-2147483649]`, false}, {`[99999999999]`, false}, {`[1.5]`, false}, {`[1e2]`, false}, {`[1,]`, false}, {`[,1]`, false},
		{`[-]`, false}, {` 0000`, false}, {`[1`, false}, {`[`, false}, {``, false}, {`["1"]`, false}, {`{}`, false},
	} {
		if got := checkInt32sText(t, tc.in); got != tc.want {
			t.Errorf("Int32sText(%q) accepted: %v, want %v", tc.in, got, tc.want)
		}
	}
}

func FuzzInt32sText(f *testing.F) {
	for _, s := range []string{`[1,-2,3]`, `[]`, `[2147483647]`, `[01]`, `[1, 2]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkInt32sText(t, string(data)) })
}

// TestRawString: RawString reads what Raw reads and a string also as
// String decodes it, or fails where String does; Skip accepts the strings
// encoding/json's validation accepts, all those String decodes and more
// (invalid UTF-8, lone surrogates: encoding/json keeps them in a
// json.RawMessage).
func TestRawString(t *testing.T) {
	for _, in := range append([]string{`"a\nb"`, `"\u00e9\ud83d\ude00x"`, `"bad \x"`, `"\ud800"`, `[1,"x"]`, `"` + strings.Repeat(`ab\"\\`, 300) + `"`}, seeds...) {
		raw, str, isString, ok := New([]byte(in)).RawString()
		wantRaw, wantOK := New([]byte(in)).Raw()
		want, sok := New([]byte(in)).String()
		if ok && (!wantOK || string(raw) != string(wantRaw)) || !ok && wantOK && (!isString || sok) {
			t.Errorf("RawString(%q) = %q, %v; Raw %q, %v", in, raw, ok, wantRaw, wantOK)
		}
		if isString && ok && (!sok || str != want) {
			t.Errorf("RawString(%q) string %q, String %q (%v)", in, str, want, sok)
		}
		if in[0] != '"' {
			continue
		}
		s := New([]byte(in))
		skip := s.Skip() && s.End()
		if skip != json.Valid([]byte(in)) || sok && !skip {
			t.Errorf("Skip(%q) = %v, String ok %v, json.Valid %v", in, skip, sok, json.Valid([]byte(in)))
		}
	}
}

// FuzzRaw: Raw accepts a document exactly when encoding/json's validation
// does (within maxDepth), and returns it without its white space around.
func FuzzRaw(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if bytes.Count(data, []byte("["))+bytes.Count(data, []byte("{")) > maxDepth {
			return
		}
		s := New(data)
		raw, ok := s.Raw()
		ok = ok && s.End()
		if ok != json.Valid(data) {
			t.Fatalf("Raw(%q) ok %v, json.Valid %v", data, ok, !ok)
		}
		if ok && string(raw) != string(bytes.TrimSpace(data)) {
			t.Fatalf("Raw(%q) = %q", data, raw)
		}
	})
}

// BenchmarkInt32sText: a long prompt's ids (200k ids of 1-6 digits).
func BenchmarkInt32sText(b *testing.B) {
	ids := make([]int32, 200000)
	for i := range ids {
		ids[i] = int32(i*7919) % 150000
	}
	data := AppendInt32s(nil, ids)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, n, ok := New(data).Int32sText(); !ok || n != len(ids) {
			b.Fatal(n, ok)
		}
	}
}

// BenchmarkInt32s: the same ids decoded, the baseline of BenchmarkInt32sText.
func BenchmarkInt32s(b *testing.B) {
	ids := make([]int32, 200000)
	for i := range ids {
		ids[i] = int32(i*7919) % 150000
	}
	data := AppendInt32s(nil, ids)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if v, ok := New(data).Int32s(); !ok || len(v) != len(ids) {
			b.Fatal(ok)
		}
	}
}

// TestDigitRun: every byte value at every position of the word, followed
// by bytes that carry (0xFF) or not.
func TestDigitRun(t *testing.T) {
	for _, fill := range []byte{'7', 0xFF, 0x00, '/', ':'} {
		for p := 0; p < 8; p++ {
			for c := 0; c < 256; c++ {
				var w [8]byte
				for k := range w {
					switch {
					case k < p:
						w[k] = '0' + byte(k)
					case k == p:
						w[k] = byte(c)
					default:
						w[k] = fill
					}
				}
				want := 0
				for want < 8 && w[want] >= '0' && w[want] <= '9' {
					want++
				}
				if got := digitRun(binary.LittleEndian.Uint64(w[:])); got != want {
					t.Fatalf("digitRun(%q) = %d, want %d", w, got, want)
				}
			}
		}
	}
}

package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// callJSON writes a model_request event as the gateway does (field order
// of proxy.appendModelCall): a conversation of n tool results.
func callJSON(agent string, prompt, resp []int32, n int, extra string) []byte {
	var msgs []string
	for i := 0; i < n; i++ {
		msgs = append(msgs, fmt.Sprintf(`{"role":"tool","content":"result %d %s"}`, i, strings.Repeat("x", 50*i)))
	}
	req := `{"model":"m","messages":[` + strings.Join(msgs, ",") + `],"tools":[{"type":"function","function":{"name":"sh"}}],"temperature":1}`
	ids := func(v []int32) string { b, _ := json.Marshal(v); return string(b) }
	ag := ""
	if agent != "" {
		ag = `,"agent":"` + agent + `"`
	}
	return []byte(`{"call_id":"c` + fmt.Sprint(n) + `","api":"chat.completions","model":"m","model_version":3` + ag +
		`,"prompt_ids":` + ids(prompt) + `,"response_ids":` + ids(resp) + `,"response_logprobs":[-0.5,-1.25],"finish_reason":"stop","continued":true` +
		`,"sampling":{"temperature":1},"request":` + req + `,"response":{"id":"x","choices":[]}` + extra + `,"usage":{"prompt_tokens":3,"completion_tokens":2},"latency_ms":1.5}`)
}

func TestEncodeEventRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	randIDs := func(n int) []int32 {
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(r.IntN(200000)) - 5
		}
		return v
	}
	p1, r1 := randIDs(500), randIDs(20)
	p2 := append(append(append([]int32{}, p1...), r1...), randIDs(300)...)
	base1, _, _ := BaseOf(callJSON("", p1, r1, 5, ""))
	base1.Seq = 7
	for _, tc := range []struct {
		name    string
		data    []byte
		base    *CallBase
		encoded bool // stored in the encoded form
		maxLen  int  // the stored form is at most this long (0: no bound)
	}{
		{"first call", callJSON("", p1, r1, 5, ""), nil, true, 0},
		{"continued call", callJSON("", p2, randIDs(10), 8, ""), base1, true, 2000},
		{"history rewritten", callJSON("", randIDs(400), r1, 2, ""), base1, true, 0},
		{"agent named", callJSON("planner", p2, r1, 6, ""), base1, true, 0},
		{"empty ids", callJSON("", []int32{}, []int32{}, 1, ""), base1, true, 0},
		{"extreme ids", callJSON("", []int32{-2147483648, 2147483647, 0}, []int32{-1}, 1, ""), nil, true, 0},
		{"ids with spaces stay", []byte(`{"prompt_ids":[1, 2],"request":{"a":1}}`), nil, false, 0},
		{"ids null stay", []byte(`{"prompt_ids":null,"request":{"a":1}}`), nil, false, 0},
		{"ids leading zero stay", []byte(`{"prompt_ids":[01],"request":{}}`), nil, false, 0},
		{"ids float stay", []byte(`{"prompt_ids":[1.0]}`), nil, false, 0},
		{"ids out of range stay", []byte(`{"prompt_ids":[2147483648]}`), nil, false, 0},
		{"duplicate keys", []byte(`{"prompt_ids":[1,2],"prompt_ids":[3]}`), nil, true, 0},
		{"ids not an array", []byte(`{"prompt_ids":5,"response_ids":"x"}`), nil, false, 0},
		{"prefix ends inside an id", callJSON("", []int32{12, 345}, []int32{6}, 1, ""), &CallBase{Seq: 3, IDs: []byte("12,34")}, true, 0},
		{"whitespace around", []byte(" {\"request\" : {\"messages\":[1,2]} , \"x\":\"}\\\"]\" }\n"), base1, true, 0},
		{"not an object", []byte(`[1,2,3]`), nil, false, 0},
		{"string", []byte(`"prompt_ids"`), nil, false, 0},
		{"empty object", []byte(`{}`), nil, true, 0},
		{"error record", []byte(`{"call_id":"c","api":"chat.completions","status":"error","http_status":502,"error":"{\"error\":{}}"}`), base1, true, 0},
		{"request not object", []byte(`{"request":"abc","prompt_ids":[5]}`), base1, true, 0},
		{"unicode", []byte(`{"request":{"m":"héllo \u00e9 ☃"},"prompt_ids":[1]}`), nil, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored, self, _ := EncodeEvent(tc.data, tc.base)
			if Encoded(stored) != tc.encoded {
				t.Fatalf("encoded = %v, want %v", Encoded(stored), tc.encoded)
			}
			if tc.maxLen > 0 && len(stored) > tc.maxLen {
				t.Errorf("stored %d bytes of %d, want at most %d", len(stored), len(tc.data), tc.maxLen)
			}
			var b *CallBase
			if BaseSeq(stored) != 0 {
				b = tc.base
			}
			got, err := DecodeEvent(stored, b)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.data) {
				t.Fatalf("decoded\n%s\nwant\n%s", got, tc.data)
			}
			// The base an event provides is the same from the JSON, the
			// encoder and the decoder.
			want, _, ok := BaseOf(tc.data)
			if !ok {
				return
			}
			_, dself, err := decodeEvent(stored, b, true)
			if err != nil {
				t.Fatal(err)
			}
			bases := []*CallBase{dself}
			if tc.encoded {
				bases = append(bases, self)
			}
			for _, s := range bases {
				if (s == nil) != (want == nil) {
					t.Errorf("base %+v, want %+v (an event with neither ids nor request provides none)", s, want)
				} else if s != nil && (!bytes.Equal(s.IDs, want.IDs) || !bytes.Equal(s.Request, want.Request)) {
					t.Errorf("base %s / %q, want %s / %q", s.IDs, s.Request, want.IDs, want.Request)
				}
			}
		})
	}
}

func TestDecodeEventErrors(t *testing.T) {
	p := []int32{1, 2, 3}
	base, _, _ := BaseOf(callJSON("", p, p, 3, ""))
	base.Seq = 4
	stored, _, _ := EncodeEvent(callJSON("", append(p, p...), p, 4, ""), base)
	for _, tc := range []struct {
		name   string
		stored []byte
		base   *CallBase
		want   string
	}{
		{"base missing", stored, nil, "base missing"},
		{"wrong base", stored, &CallBase{Seq: 9}, "base missing"},
		{"truncated", stored[:len(stored)-3], base, "decompress"},
		{"bad payload", []byte{0, 'E', 1, 0, 4, 0xff, 0xff}, base, "corrupt"},
		{"version", append([]byte{0, 'E', 9, 0}, stored[4:]...), base, "encoding version 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeEvent(tc.stored, tc.base)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestDecodeEventsChain stores a rollout of calls through Bases, then
// reads them back whole, from the middle (bases outside the read, cache
// cold) and with two agents interleaved.
func TestDecodeEventsChain(t *testing.T) {
	stored := map[int64][]byte{}
	var want []Event
	c := NewBases(DefaultBasesBytes)
	var prompt []int32
	seq := int64(0)
	for i := 0; i < 30; i++ {
		agent := []string{"", "critic"}[i%2]
		prompt = append(prompt, int32(i), int32(i*7))
		data := callJSON(agent, prompt, []int32{int32(i)}, i, "")
		b := c.Batch()
		seq++
		enc := b.Encode("r", "a", NewEvent{Type: EventModelRequest, Data: data})
		if i >= 2 && BaseSeq(enc.Data) != seq-4 {
			t.Fatalf("call %d stored against %d, want %d", i, BaseSeq(enc.Data), seq-4)
		}
		b.Stored("r", "a", enc, seq)
		b.Commit()
		stored[seq] = enc.Data
		want = append(want, Event{Seq: seq, Type: EventModelRequest, Data: data})
		seq++
		stored[seq] = []byte(`{"value":1}`)
		want = append(want, Event{Seq: seq, Type: EventReward, Data: stored[seq]})
	}
	fetch := func(s int64) ([]byte, error) {
		d, ok := stored[s]
		if !ok {
			return nil, fmt.Errorf("no event %d", s)
		}
		return d, nil
	}
	for _, tc := range []struct {
		name  string
		from  int
		cache *Bases
	}{
		{"all, warm", 0, c},
		{"all, cold", 0, NewBases(DefaultBasesBytes)},
		{"tail, cold", 41, NewBases(DefaultBasesBytes)},
		{"tail, tiny cache", 50, NewBases(1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var evs []Event
			for _, w := range want[tc.from:] {
				evs = append(evs, Event{Seq: w.Seq, Type: w.Type, Data: stored[w.Seq]})
			}
			if err := tc.cache.DecodeEvents(evs, fetch); err != nil {
				t.Fatal(err)
			}
			for i, e := range evs {
				if !bytes.Equal(e.Data, want[tc.from+i].Data) {
					t.Fatalf("event %d differs", e.Seq)
				}
			}
		})
	}
}

func TestParseIDs(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"[]", true}, {"[0]", true}, {"[1,2,3]", true}, {"[-1,0,7]", true},
		{"[2147483647,-2147483648]", true},
		{"[2147483648]", false}, {"[-2147483649]", false}, {"[99999999999999999999]", false},
		{"[-0]", false}, {"[01]", false}, {"[1,]", false}, {"[,1]", false}, {"[1 ,2]", false},
		{"[1.5]", false}, {"[1e3]", false}, {"[-]", false}, {"[", false}, {"null", false}, {"[1,,2]", false}, {"[+1]", false},
	} {
		ids, ok := parseIDs([]byte(tc.in))
		if ok != tc.ok {
			t.Errorf("%s: ok = %v, want %v", tc.in, ok, tc.ok)
			continue
		}
		if ok {
			b, _ := json.Marshal(append([]int32{}, ids...))
			if string(b) != tc.in {
				t.Errorf("%s parsed to %s", tc.in, b)
			}
		}
	}
}

// TestBases: the cache stays within its bound (oldest out first), keeps
// the newest base of a key, and forgets an ended attempt.
func TestBases(t *testing.T) {
	c := NewBases(10 * 1064)
	for i := int64(1); i <= 30; i++ {
		k := baseKey{"r", fmt.Sprint("a", i%3), ""}
		c.put(&k, &CallBase{Seq: i, IDs: make([]byte, 1000)})
		if c.size > c.max {
			t.Fatalf("size %d over %d", c.size, c.max)
		}
	}
	if c.Get(1) != nil || c.Get(30) == nil {
		t.Errorf("oldest kept or newest dropped")
	}
	k := baseKey{"r", "a0", ""}
	c.put(&k, &CallBase{Seq: 5}) // older than what the key has
	if b := c.latest(k); b == nil || b.Seq != 30 {
		t.Errorf("latest of a0 = %v, want 30", b)
	}
	c.Forget("r", "a0")
	if c.latest(k) != nil || c.Get(30) != nil || c.latest(baseKey{"r", "a1", ""}) == nil {
		t.Errorf("Forget dropped the wrong entries")
	}
}

func TestScanHelpers(t *testing.T) {
	// A value before the request, written in every way a string or
	// bracket may confuse a scanner: the request is found after it, or
	// the event is not an object.
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`"abc"`, true}, {`"a\"b"`, true}, {`"a\\"`, true}, {`"a\\\"b"`, true}, {`"\\\\"`, true}, {`"open`, false}, {`"a\"`, false},
		{`[1,2,3]`, true}, {`[]`, true}, {`[1,[2],3]`, true}, {`[1,"]",2]`, true}, {`{"a":[1,2],"b":"}"}`, true}, {`[1,2`, false},
		{`-12`, true}, {`true`, true}, {"\"\xff\\ud800\"", true}, {"\"\xff\"", true}, {`{"request":[1]}`, true},
	} {
		data := []byte(`{"x":` + tc.in + `,"request":{"a":"}"}}`)
		holes, _, ok := topFields(data)
		if ok != tc.ok {
			t.Errorf("topFields(%s): ok %v, want %v", data, ok, tc.ok)
			continue
		}
		if ok && (len(holes) != 1 || holes[0].kind != holeRequest || string(data[holes[0].start:holes[0].end]) != `{"a":"}"}`) {
			t.Errorf("topFields(%s) = %v", data, holes)
		}
	}
	long := []byte(strings.Repeat("abcdefgh", 2000))
	for _, n := range []int{0, 1, 63, 64, 65, 4095, 4096, 4097, 9000, len(long)} {
		a := append([]byte{}, long...)
		b := append([]byte{}, long...)
		if n < len(long) {
			b[n] ^= 1
		}
		if got := commonPrefix(a, b); got != n {
			t.Errorf("commonPrefix differing at %d = %d", n, got)
		}
		c := append([]byte{}, long...)
		if n < len(long) {
			c[len(c)-1-n] ^= 1
		}
		if got := commonSuffix(a, c, len(a)); got != n {
			t.Errorf("commonSuffix differing %d from the end = %d", n, got)
		}
	}
}

// TestEncodeWithLayout: an event encoded with the layout its writer gives
// is stored exactly as when the encoder finds the values itself; a wrong
// layout (out of range, out of order, another value) still stores what
// reads back as the event.
func TestEncodeWithLayout(t *testing.T) {
	prev := callJSON("", []int32{1, 2, 3}, []int32{4}, 3, "")
	data := callJSON("", []int32{1, 2, 3, 4, 9, 9}, []int32{5, 6}, 4, "")
	holes, _, _ := topFields(data)
	var right CallLayout
	for _, h := range holes {
		sp := [2]int{h.start, h.end}
		switch h.kind {
		case holePromptIDs:
			right.PromptIDs = sp
		case holeResponseIDs:
			right.ResponseIDs = sp
		default:
			right.Request = sp
		}
	}
	logprobs := bytes.Index(data, []byte(`[-0.5`))
	shift := func(l CallLayout, d int) CallLayout { l.Request[0] += d; return l }
	for _, tc := range []struct {
		name   string
		layout *CallLayout
		same   bool // stored exactly as without a layout
	}{
		{"none", nil, true},
		{"right", &right, true},
		{"out of range", &CallLayout{PromptIDs: [2]int{len(data) - 2, len(data) + 10}}, true},
		{"out of order", &CallLayout{PromptIDs: right.Request, Request: right.PromptIDs}, true},
		{"request shifted", func() *CallLayout { l := shift(right, 1); return &l }(), true},
		{"another array", &CallLayout{PromptIDs: [2]int{logprobs, logprobs + len(`[-0.5,-1.25]`)}, Request: right.Request}, false},
		{"no request", &CallLayout{PromptIDs: right.PromptIDs, ResponseIDs: right.ResponseIDs}, false},
		{"other agent", &CallLayout{PromptIDs: right.PromptIDs, ResponseIDs: right.ResponseIDs, Request: right.Request, Agent: "x"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewBases(DefaultBasesBytes)
			b := c.Batch()
			first := b.Encode("r", "a", NewEvent{Type: EventModelRequest, Data: prev})
			b.Stored("r", "a", first, 1)
			b.Commit()
			want := c.Batch().Encode("r", "a", NewEvent{Type: EventModelRequest, Data: data})
			got := c.Batch().Encode("r", "a", NewEvent{Type: EventModelRequest, Data: data, Layout: tc.layout})
			if tc.same != bytes.Equal(got.Data, want.Data) {
				t.Errorf("stored form same as without a layout: %v, want %v", !tc.same, tc.same)
			}
			var base *CallBase
			if BaseSeq(got.Data) == 1 {
				_, base, _ = decodeEvent(first.Data, nil, true)
				base.Seq = 1
			}
			back, err := DecodeEvent(got.Data, base)
			if err != nil || !bytes.Equal(back, data) {
				t.Fatalf("reads back %.80q, %v", back, err)
			}
		})
	}
}

// TestReassemblyCheck: the encoder's in-place check of its reassembly
// accepts exactly the event's JSON: any byte changed, added or missing
// is refused.
func TestReassemblyCheck(t *testing.T) {
	base, _, _ := BaseOf(callJSON("", []int32{1, 2, 3}, []int32{4}, 3, ""))
	base.Seq = 1
	data := callJSON("", []int32{1, 2, 3, 4, 77, -8}, []int32{5, 6}, 4, "")
	stored, _, _ := EncodeEvent(data, base)
	if !Encoded(stored) {
		t.Fatal("not encoded")
	}
	_, n := binary.Uvarint(stored[4:])
	p := stored[4+n:]
	if stored[3]&flagZstd != 0 {
		var err error
		if p, err = zdec.DecodeAll(p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := walkPayload(p, base, false, data); err != nil {
		t.Fatalf("the event itself refused: %v", err)
	}
	ids := bytes.Index(data, []byte("77"))
	req := bytes.Index(data, []byte(`"request":`)) + 40
	for _, tc := range []struct {
		name string
		mut  func([]byte) []byte
	}{
		{"first byte", func(b []byte) []byte { b[0] = '['; return b }},
		{"in new ids", func(b []byte) []byte { b[ids] = '8'; return b }},
		{"in base ids", func(b []byte) []byte { b[ids-4] = '9'; return b }},
		{"in request", func(b []byte) []byte { b[req] ^= 1; return b }},
		{"last byte", func(b []byte) []byte { b[len(b)-1] = ' '; return b }},
		{"longer", func(b []byte) []byte { return append(b, ' ') }},
		{"shorter", func(b []byte) []byte { return b[:len(b)-1] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := walkPayload(p, base, false, tc.mut(bytes.Clone(data))); err == nil {
				t.Fatal("a different JSON accepted")
			}
		})
	}
}

// TestEncodeReusesWritersEncoding: a call that carries the writer's own
// encoding (NewEvent.Encoded, the gateway's size measure) is stored as
// the store would encode it itself, naming the store's base, and the
// writer's encoding is reused only where the two bases hold the same
// call.
func TestEncodeReusesWritersEncoding(t *testing.T) {
	writer, st := NewBases(1<<20), NewBases(1<<20)
	var prompt []int32
	for i := 1; i <= 6; i++ {
		prompt = append(prompt, int32(10*i), int32(10*i+1))
		ev := NewEvent{Type: EventModelRequest, Data: callJSON("", prompt, []int32{7, 8}, i, "")}
		wb := writer.Batch()
		enc := wb.Encode("r", "a", ev)
		wb.Stored("r", "a", enc, int64(1000+i))
		wb.Commit()

		k := baseKey{"r", "a", ""}
		base := st.latest(k)
		if i == 4 {
			// The store missed the writer's last call: its base is an
			// older one, which the writer's encoding cannot be reused
			// against.
			base = nil
			st.Forget("r", "a")
		}
		if _, ok := enc.reuse(base); ok != (i != 4) {
			t.Fatalf("call %d: reused %v, want %v", i, ok, i != 4)
		}
		if base != nil {
			for name, other := range map[string]*CallBase{
				"other ids":     {Seq: base.Seq, IDs: append(bytes.Clone(base.IDs), '9'), Request: base.Request},
				"other request": {Seq: base.Seq, IDs: base.IDs, Request: append(bytes.Clone(base.Request), ' ')},
			} {
				if _, ok := enc.reuse(other); ok {
					t.Fatalf("call %d: reused against a base with %s", i, name)
				}
			}
		}
		want := st.Batch().Encode("r", "a", ev)
		ev.Encoded = &enc
		sb := st.Batch()
		got := sb.Encode("r", "a", ev)
		if !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("call %d: stored form differs from the store's own encoding", i)
		}
		if i > 1 && i != 4 && BaseSeq(got.Data) != int64(i-1) {
			t.Fatalf("call %d names base %d, want the store's %d", i, BaseSeq(got.Data), i-1)
		}
		back, err := DecodeEvent(got.Data, base)
		if err != nil || !bytes.Equal(back, ev.Data) {
			t.Fatalf("call %d does not decode back: %v", i, err)
		}
		sb.Stored("r", "a", got, int64(i))
		sb.Commit()
		if enc.self != nil && enc.self.Seq != int64(1000+i) {
			t.Fatalf("call %d: the writer's base got seq %d from the store", i, enc.self.Seq)
		}
	}
}

package store

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenEvents is a chain of model_request events, each encoded against
// the one before, with what a hostile writer may put in one: escapes and
// invalid UTF-8 in strings, lone surrogates, white space, keys written with
// escapes or repeated, ids not as encoding/json writes them, deep nesting,
// and JSON that is not an object.
func goldenEvents() [][]byte {
	deep := strings.Repeat("[", 600) + strings.Repeat("]", 600)
	evs := [][]byte{
		callJSON("", []int32{1, 2, 3}, []int32{4}, 1, ""),
		callJSON("", []int32{1, 2, 3, 4, 9}, []int32{5, 6}, 2, ""),
		callJSON("a\\\"b", []int32{1, 2, 3, 4, 9, 5, 6, 7}, []int32{2147483647, -2147483648, 0}, 3, `,"note":"]}\\\"[{"`),
		[]byte(`{ "call_id" : "x", "prompt_ids" : [1, 2, 3] , "response_ids":[ 4 ],"request" : {"messages":[{"role":"user","content":"caf\u00e9 \ud800 \"q\" ` + "\xff\xfe" + `"}]}, "agent":"b" }`),
		[]byte(`{"prompt\u005fids":[1,2,3,4,5],"response_ids":[6],"request":{"a":1},"request":{"a":2,"deep":` + deep + `}}`),
		[]byte(`{"prompt_ids":null,"response_ids":[],"request":{"x":"\\\\"},"agent":"` + "\xff" + `"}`),
		[]byte(`{"prompt_ids":[01,2],"response_ids":[-0],"request":{"n":[1e3,-0.5,true,false,null]}}`),
		[]byte(`{"prompt_ids":[1,2,3,4,5,6,7,8,9,10,11,12],"response_ids":[2147483648],"request":{"messages":[{"role":"tool","content":"` + strings.Repeat("long tool output ", 40) + `"}]}}`),
		[]byte(`[1,2,3]`),
		[]byte(`{}`),
	}
	return evs
}

// TestCodecGolden: the stored forms of goldenEvents are those in
// testdata (the format on disk does not change), and read back as the
// events.
func TestCodecGolden(t *testing.T) {
	path := filepath.Join("testdata", "codec_golden.hex")
	var got []string
	var base *CallBase
	for i, ev := range goldenEvents() {
		stored, self, _ := EncodeEvent(ev, base)
		back, err := DecodeEvent(stored, base)
		if err != nil || !bytes.Equal(back, ev) {
			t.Fatalf("event %d: decoded %q (%v), want %q", i, back, err, ev)
		}
		got = append(got, hex.EncodeToString(stored))
		if self != nil {
			self.Seq = int64(i + 1)
			base = self
		}
	}
	text := strings.Join(got, "\n") + "\n"
	if *update {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	wl, gl := strings.Split(string(want), "\n"), strings.Split(text, "\n")
	if len(wl) != len(gl) {
		t.Fatalf("%d stored forms, golden has %d", len(gl), len(wl))
	}
	for i := range wl {
		if wl[i] != gl[i] {
			t.Errorf("event %d: stored form\n%s\nwant\n%s", i, gl[i], wl[i])
		}
	}
}

package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// fixtureDir is testdata/tokenizer at the repository root (the golden
// tokenizer fixtures, with their licenses); tests run in the package
// directory.
const fixtureDir = "../testdata/tokenizer"

var fixtureNames = []string{"qwen3", "llama3"}

var (
	loadOnce sync.Map // name → *bpeOnce
)

type bpeOnce struct {
	once sync.Once
	tok  *BPE
	err  error
}

// fixtureBPE loads a fixture tokenizer once per test binary.
func fixtureBPE(tb testing.TB, name string) *BPE {
	tb.Helper()
	v, _ := loadOnce.LoadOrStore(name, &bpeOnce{})
	o := v.(*bpeOnce)
	o.once.Do(func() {
		data, err := os.ReadFile(filepath.Join(fixtureDir, name, "tokenizer.json"))
		if err != nil {
			o.err = err
			return
		}
		o.tok, o.err = ParseBPE(data)
	})
	if o.err != nil {
		tb.Fatalf("load %s: %v", name, o.err)
	}
	return o.tok
}

// readJSONL decodes every line of a fixture file into a new T.
func readJSONL[T any](tb testing.TB, path string) []T {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatalf("open fixture: %v", err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			tb.Fatalf("%s line %d: %v", path, len(out)+1, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	if len(out) == 0 {
		tb.Fatalf("%s: no records", path)
	}
	return out
}

type goldenRec struct {
	Text string  `json:"text"`
	IDs  []int32 `json:"ids"`
}

type pretokRec struct {
	Text   string   `json:"text"`
	Pieces []string `json:"pieces"`
}

func TestGoldenEncode(t *testing.T) {
	t.Parallel()
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tok := fixtureBPE(t, name)
			recs := readJSONL[goldenRec](t, filepath.Join(fixtureDir, name, "golden.jsonl"))
			fails := 0
			for i, r := range recs {
				got := tok.Encode(r.Text)
				if !slices.Equal(got, r.IDs) {
					fails++
					if fails <= 10 {
						t.Errorf("line %d %q:\n got %v\nwant %v", i+1, trunc(r.Text), got, r.IDs)
					}
				}
			}
			if fails > 0 {
				t.Errorf("%d of %d golden encodings differ", fails, len(recs))
			}
		})
	}
}

func TestGoldenDecode(t *testing.T) {
	t.Parallel()
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tok := fixtureBPE(t, name)
			recs := readJSONL[goldenRec](t, filepath.Join(fixtureDir, name, "decode.jsonl"))
			for i, r := range recs {
				if got := tok.Decode(r.IDs); got != r.Text {
					t.Errorf("line %d %v:\n got %q\nwant %q", i+1, r.IDs, got, r.Text)
				}
			}
		})
	}
}

// TestGoldenRoundTrip checks Decode(Encode(text)) == NFC-free text for
// the golden corpus (Llama 3 has no normalizer, so it must be exact).
func TestGoldenRoundTrip(t *testing.T) {
	t.Parallel()
	tok := fixtureBPE(t, "llama3")
	recs := readJSONL[goldenRec](t, filepath.Join(fixtureDir, "llama3", "golden.jsonl"))
	for i, r := range recs {
		if got := tok.Decode(tok.Encode(r.Text)); got != r.Text {
			t.Errorf("line %d: round trip %q != %q", i+1, trunc(got), trunc(r.Text))
		}
	}
}

func TestPretokenize(t *testing.T) {
	t.Parallel()
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tok := fixtureBPE(t, name)
			recs := readJSONL[pretokRec](t, filepath.Join(fixtureDir, name, "pretokenize.jsonl"))
			for i, r := range recs {
				got := []string{}
				tok.split.split(r.Text, func(p string) { got = append(got, p) })
				if !slices.Equal(got, r.Pieces) {
					t.Errorf("line %d %q:\n got %q\nwant %q", i+1, trunc(r.Text), got, r.Pieces)
				}
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLossyUTF8(t *testing.T) {
	tests := []struct {
		in   []byte
		want string
	}{
		{[]byte("héllo"), "héllo"},
		{[]byte{0xF0, 0x9F, 0x98}, "\uFFFD"},
		{[]byte{0xED, 0xA0, 0x80}, "\uFFFD\uFFFD\uFFFD"},
		{[]byte{'a', 0xC3}, "a\uFFFD"},
		{[]byte{0xC3, 'a'}, "\uFFFDa"},
		{[]byte{0xFF, 0xFE}, "\uFFFD\uFFFD"},
		{[]byte{0xE2, 0x82, 0xAC, 0xE2, 0x82}, "€\uFFFD"},
		{[]byte{0xC0, 0x80}, "\uFFFD\uFFFD"},
		{[]byte{0xF4, 0x90, 0x80, 0x80}, "\uFFFD\uFFFD\uFFFD\uFFFD"},
	}
	for _, tt := range tests {
		if got := lossyUTF8(tt.in); got != tt.want {
			t.Errorf("lossyUTF8(% x) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestFastSplitterMatchesRegexp2 checks the hand-written matcher against
// regexp2 running the same patterns, on the fixture corpus and on random
// strings drawn from an alphabet of the characters that matter. regexp2's
// (?i) does not fold U+017F (ſ) to s while the reference library does (the
// golden pretokenize fixture has "he'ſtold" → "he", "'ſ", "told"), so texts
// with ſ are compared against the fixture only.
func TestFastSplitterMatchesRegexp2(t *testing.T) {
	alphabet := []rune("aZs'StTrReEvVlLdDmM 0123٣\t\n\r\u00a0\u3000\u200b\u0085.,!?-_(){}[]<>\"é日本語😀\u0301ı")
	recs := readJSONL[goldenRec](t, filepath.Join(fixtureDir, "qwen3", "golden.jsonl"))
	var corpus []string
	for _, r := range recs {
		if !strings.ContainsRune(r.Text, 'ſ') {
			corpus = append(corpus, r.Text)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		n := rng.IntN(24)
		var sb strings.Builder
		for j := 0; j < n; j++ {
			sb.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		corpus = append(corpus, sb.String())
	}
	for _, c := range []struct {
		name    string
		pattern string
		fast    fastSplitter
	}{{"qwen", patternQwen, fastSplitter{1}}, {"llama3", patternLlama3, fastSplitter{3}}} {
		t.Run(c.name, func(t *testing.T) {
			re, err := newSplitter(c.pattern + "|(?:)") // defeat the fast path
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := re.(regexSplitter); !ok {
				t.Fatalf("want regexp2 splitter, got %T", re)
			}
			fails := 0
			for _, s := range corpus {
				var a, b []string
				c.fast.split(s, func(p string) { a = append(a, p) })
				re.split(s, func(p string) { b = append(b, p) })
				if !slices.Equal(a, b) {
					fails++
					if fails < 10 {
						t.Errorf("%q:\n fast   %q\n regexp %q", s, a, b)
					}
				}
			}
		})
	}
}

func TestByteEncodeDecode(t *testing.T) {
	tok, err := NewByte()
	if err != nil {
		t.Fatal(err)
	}
	im, _ := tok.TokenID("<|im_start|>")
	end, _ := tok.TokenID("<|im_end|>")
	tests := []struct {
		text string
		want []int32
	}{
		{"", []int32{}},
		{"hi", []int32{'h', 'i'}},
		{"<|im_start|>u\n<|im_end|>", []int32{im, 'u', '\n', end}},
		{"<|im_start", []int32{'<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't'}},
		{"é", []int32{0xC3, 0xA9}},
		{"<tool_call><tool_call>", []int32{259, 259}},
	}
	for _, tt := range tests {
		got := tok.Encode(tt.text)
		if !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
		}
		if back := tok.Decode(got); back != tt.text {
			t.Errorf("Decode(Encode(%q)) = %q", tt.text, back)
		}
	}
	if im != 257 || end != 258 || tok.VocabSize() != 256+len(ChatSpecialTokens) {
		t.Errorf("ids: im_start=%d im_end=%d vocab=%d", im, end, tok.VocabSize())
	}
	if !tok.IsSpecial(end) || tok.IsSpecial('a') {
		t.Error("IsSpecial wrong")
	}
	if got := tok.Decode([]int32{0xF0, 0x9F, 0x98}); got != "\uFFFD" {
		t.Errorf("partial char decodes to %q", got)
	}
	if _, err := NewByte("<a>", "<a>"); err == nil {
		t.Error("repeated special token accepted")
	}
}

// TestByteSaveLoad checks that a saved byte tokenizer loads back as a Byte,
// and that the generic BPE loader reads the same file to the same ids.
func TestByteSaveLoad(t *testing.T) {
	tok, err := NewByte(append(slices.Clone(ChatSpecialTokens), "<x>")...)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := tok.Save(filepath.Join(dir, FileName)); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := loaded.(*Byte)
	if !ok {
		t.Fatalf("LoadDir returned %T, want *Byte", loaded)
	}
	if !slices.Equal(b.AddedTokens(), tok.AddedTokens()) {
		t.Errorf("added tokens %v != %v", b.AddedTokens(), tok.AddedTokens())
	}
	data, err := tok.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	bpe, err := ParseBPE(data)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"<|im_start|>user\nhello wörld 😀  <x>\n\n<|im_end|>", "  a\tb\r\n", "<think>x</think>"}
	for _, s := range texts {
		want := tok.Encode(s)
		if got := bpe.Encode(s); !slices.Equal(got, want) {
			t.Errorf("BPE loader on byte tokenizer.json: %q → %v, want %v", s, got, want)
		}
		if got := loaded.Encode(s); !slices.Equal(got, want) {
			t.Errorf("loaded byte tokenizer: %q → %v, want %v", s, got, want)
		}
		if got := bpe.Decode(want); got != s {
			t.Errorf("BPE decode %q != %q", got, s)
		}
	}
	if bpe.VocabSize() != tok.VocabSize() {
		t.Errorf("vocab %d != %d", bpe.VocabSize(), tok.VocabSize())
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ name, json string }{
		{"not json", `{`},
		{"unigram", `{"model":{"type":"Unigram"},"pre_tokenizer":{"type":"ByteLevel"}}`},
		{"no pretokenizer", `{"model":{"type":"BPE","vocab":{"a":0}}}`},
		{"bad merge", `{"model":{"type":"BPE","vocab":{"a":0},"merges":["a b"]},"pre_tokenizer":{"type":"ByteLevel"}}`},
		{"bad regex", `{"model":{"type":"BPE","vocab":{}},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(("},"behavior":"Isolated"},{"type":"ByteLevel"}]}}`},
	}
	for _, tt := range tests {
		if _, err := Parse([]byte(tt.json)); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
	if _, err := LoadDir(t.TempDir()); err == nil {
		t.Error("LoadDir on empty dir: no error")
	}
}

// TestIgnoreMerges shows Llama 3's ignore_merges flag changes results: a
// vocab word reached differently by merges.
func TestIgnoreMerges(t *testing.T) {
	tok := fixtureBPE(t, "llama3")
	recs := readJSONL[goldenRec](t, filepath.Join(fixtureDir, "llama3", "golden.jsonl"))
	clone := &BPE{vocab: tok.vocab, tokens: tok.tokens, special: tok.special, added: tok.added,
		nfc: tok.nfc, split: tok.split, byteID: tok.byteID, merges: tok.merges,
		ignoreMerges: false, cache: map[string][]int32{}}
	differ := 0
	for _, r := range recs {
		if !slices.Equal(clone.Encode(r.Text), r.IDs) {
			differ++
		}
	}
	if differ == 0 {
		t.Error("ignore_merges=false gives the same ids on the whole corpus; the fixture should exercise it")
	}
}

func TestBPEConcurrent(t *testing.T) {
	tok := fixtureBPE(t, "qwen3")
	recs := readJSONL[goldenRec](t, filepath.Join(fixtureDir, "qwen3", "golden.jsonl"))
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			for i := g; i < len(recs); i += 4 {
				if !slices.Equal(tok.Encode(recs[i].Text), recs[i].IDs) {
					done <- errf(recs[i].Text)
					return
				}
			}
			done <- nil
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

type errf string

func (e errf) Error() string { return "concurrent encode differs for " + trunc(string(e)) }

func TestInvalidUTF8Input(t *testing.T) {
	for _, name := range fixtureNames {
		tok := fixtureBPE(t, name)
		s := "a\xff\xfeb \xc3"
		ids := tok.Encode(s)
		if got := tok.DecodeBytes(ids); string(got) != s {
			t.Errorf("%s: raw bytes round trip %q != %q", name, got, s)
		}
		if !utf8.ValidString(tok.Decode(ids)) {
			t.Errorf("%s: Decode returned invalid UTF-8", name)
		}
	}
}

// TestStreamDecoder feeds ids one at a time and checks that the pieces
// concatenate to Decode of all ids and that no piece ends inside a
// character.
func TestStreamDecoder(t *testing.T) {
	tok := fixtureBPE(t, "qwen3")
	texts := []string{"héllo 😀👍🏽 日本語 🇫🇷", "plain", "\xf0\x9f\x98 broken \xed\xa0\x80", "👨‍👩‍👧"}
	recs := readJSONL[goldenRec](t, filepath.Join(fixtureDir, "qwen3", "decode.jsonl"))
	var idss [][]int32
	for _, s := range texts {
		idss = append(idss, tok.Encode(s))
	}
	for _, r := range recs {
		idss = append(idss, r.IDs)
	}
	for _, ids := range idss {
		d := NewStreamDecoder(tok)
		var sb strings.Builder
		for _, id := range ids {
			piece := d.Add(id)
			if !utf8.ValidString(piece) {
				t.Fatalf("invalid piece %q", piece)
			}
			sb.WriteString(piece)
		}
		sb.WriteString(d.Flush())
		if want := tok.Decode(ids); sb.String() != want {
			t.Errorf("stream %v:\n got %q\nwant %q", ids, sb.String(), want)
		}
	}
	// A multi-byte character split over byte tokens is held back.
	b, _ := NewByte()
	d := NewStreamDecoder(b)
	if got := d.Add(0xF0, 0x9F); got != "" {
		t.Errorf("partial char released: %q", got)
	}
	if got := d.Add(0x98, 0x80, 'a'); got != "😀a" {
		t.Errorf("got %q", got)
	}
}

// TestRegexFallbackTokenizer loads a GPT-2 style tokenizer.json (ByteLevel
// with use_regex, "a b" merges) that takes the regexp2 path.
func TestRegexFallbackTokenizer(t *testing.T) {
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteEnc[b])] = b
	}
	vocab["Ġt"] = 256
	vocab["he"] = 257
	vocab["Ġthe"] = 258
	vocab["'s"] = 259
	f := map[string]any{
		"added_tokens":  []map[string]any{{"id": 300, "content": "<|endoftext|>", "special": true}},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{"Ġ t", "h e", "Ġt he", "' s"}},
	}
	data, _ := json.Marshal(f)
	tok, err := ParseBPE(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tok.split.(regexSplitter); !ok {
		t.Fatalf("splitter %T, want regexp2", tok.split)
	}
	got := tok.Encode("it's the  the<|endoftext|>")
	want := []int32{'i', 't', 259, 258, ' ', 258, 300}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if s := tok.Decode(got); s != "it's the  the<|endoftext|>" {
		t.Errorf("decode %q", s)
	}
	if tok.VocabSize() != 301 {
		t.Errorf("vocab size %d", tok.VocabSize())
	}
}

// TestFingerprint: one vocabulary gives one fingerprint whichever loader
// read it (the byte tokenizer and the BPE loader on its tokenizer.json);
// another special token, another order of the added tokens or a learned
// BPE give another.
func TestFingerprint(t *testing.T) {
	byteTok, err := NewByte()
	if err != nil {
		t.Fatal(err)
	}
	data, err := byteTok.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	asBPE, err := ParseBPE(data)
	if err != nil {
		t.Fatal(err)
	}
	extra, err := NewByte(append(slices.Clone(ChatSpecialTokens), "<x>")...)
	if err != nil {
		t.Fatal(err)
	}
	swapped := slices.Clone(ChatSpecialTokens)
	swapped[1], swapped[2] = swapped[2], swapped[1]
	reordered, err := NewByte(swapped...)
	if err != nil {
		t.Fatal(err)
	}
	learned, err := TrainBPE([]string{"abab abab abab cdcd cdcd"}, 3)
	if err != nil {
		t.Fatal(err)
	}
	bpe, err := Parse(learned)
	if err != nil {
		t.Fatal(err)
	}
	base := Fingerprint(byteTok)
	if got := Fingerprint(asBPE); got != base {
		t.Errorf("the BPE loader's fingerprint of the byte tokenizer's file differs: %s vs %s", got, base)
	}
	for name, tok := range map[string]Tokenizer{"an added token": extra, "reordered specials": reordered, "a learned BPE": bpe} {
		if Fingerprint(tok) == base {
			t.Errorf("%s: same fingerprint as the byte tokenizer", name)
		}
	}
}

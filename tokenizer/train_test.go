package tokenizer

import (
	"strings"
	"testing"
)

func TestTrainBPE(t *testing.T) {
	var texts []string
	for i := range 300 {
		q := []string{"What is 71 times 3?", "What is 5 plus 48?", "What is 90 minus 12?"}[i%3]
		texts = append(texts, "<|im_start|>system\nUse the calculator, then reply with the number.<|im_end|>\n"+
			"<|im_start|>user\n"+q+"<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"+
			`{"name": "calculator", "arguments": {"expression": "71*3"}}`+"\n</tool_call><|im_end|>\n")
	}
	data, err := TrainBPE(texts, 200)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ParseBPE(data)
	if err != nil {
		t.Fatal(err)
	}
	byteTok, _ := NewByte()
	var before, after int
	for _, s := range texts[:3] {
		ids := tok.Encode(s)
		if got := tok.Decode(ids); got != s {
			t.Fatalf("round trip:\n got %q\nwant %q", got, s)
		}
		before += len(byteTok.Encode(s))
		after += len(ids)
	}
	if after*5 > before*2 {
		t.Errorf("%d byte tokens became %d: want at least 2.5x fewer on the training text", before, after)
	}
	// Digits stay single tokens, specials are whole and special.
	ids := tok.Encode("<|im_start|>1234567890 x=42<|im_end|>")
	var digits int
	for _, id := range ids {
		s := tok.Decode([]int32{id})
		if strings.ContainsAny(s, "0123456789") {
			if len(strings.TrimSpace(s)) != 1 {
				t.Errorf("token %d %q merges a digit with something", id, s)
			}
			digits++
		}
	}
	if digits != 12 {
		t.Errorf("%d digit tokens, want 12: %v", digits, ids)
	}
	if id, ok := tok.TokenID("<|im_start|>"); !ok || !tok.IsSpecial(id) || ids[0] != id {
		t.Errorf("<|im_start|>: id %d ok %v special %v, first id %d", id, ok, tok.IsSpecial(id), ids[0])
	}
	if n := tok.VocabSize(); n > 256+200+len(ChatSpecialTokens) || n < 300 {
		t.Errorf("vocab %d", n)
	}
	// Deterministic: the same texts give the same file.
	again, _ := TrainBPE(texts, 200)
	if string(again) != string(data) {
		t.Error("two trainings on the same texts differ")
	}
	// Merging stops when no pair repeats; bad input is refused.
	small, err := TrainBPE([]string{"ab"}, 50)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := ParseBPE(small); st.VocabSize() != 256+len(ChatSpecialTokens) {
		t.Errorf("one-word corpus: vocab %d, want no merges", st.VocabSize())
	}
	if _, err := TrainBPE(texts, -1); err == nil {
		t.Error("negative merges: no error")
	}
	if _, err := TrainBPE(texts, 10, "<a>", "<a>"); err == nil {
		t.Error("repeated special: no error")
	}
}

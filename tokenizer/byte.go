package tokenizer

import (
	"encoding/json"
	"fmt"
)

// Byte is a byte-level tokenizer: id b (0..255) is byte b; ids from 256 on
// are added tokens matched as a whole in the text.
type Byte struct {
	added   []AddedToken
	matcher *addedMatcher
}

// NewByte returns a byte tokenizer whose added tokens, all special, get
// ids 256, 257, ... in the given order. With no arguments it uses
// [ChatSpecialTokens].
func NewByte(specials ...string) (*Byte, error) {
	if len(specials) == 0 {
		specials = ChatSpecialTokens
	}
	seen := map[string]bool{}
	added := make([]AddedToken, len(specials))
	for i, s := range specials {
		if s == "" || seen[s] {
			return nil, fmt.Errorf("tokenizer: added token %q is empty or repeated", s)
		}
		seen[s] = true
		added[i] = AddedToken{ID: int32(256 + i), Content: s, Special: true}
	}
	return &Byte{added: added, matcher: newAddedMatcher(added)}, nil
}

// Encode implements [Tokenizer].
func (t *Byte) Encode(text string) []int32 {
	ids := make([]int32, 0, len(text))
	t.matcher.split(text,
		func(s string) {
			for i := 0; i < len(s); i++ {
				ids = append(ids, int32(s[i]))
			}
		},
		func(id int32) { ids = append(ids, id) })
	return ids
}

// Decode implements [Tokenizer].
func (t *Byte) Decode(ids []int32) string { return lossyUTF8(t.DecodeBytes(ids)) }

// DecodeBytes implements [Tokenizer].
func (t *Byte) DecodeBytes(ids []int32) []byte {
	out := make([]byte, 0, len(ids))
	for _, id := range ids {
		switch {
		case id >= 0 && id < 256:
			out = append(out, byte(id))
		case id >= 256 && int(id) < 256+len(t.added):
			out = append(out, t.added[id-256].Content...)
		}
	}
	return out
}

// TokenID implements [Tokenizer]. Byte tokens are named by their
// byte-level (GPT-2) string, as in tokenizer.json, e.g. "Ġ" for a space.
func (t *Byte) TokenID(tok string) (int32, bool) {
	if id, ok := t.matcher.byContent[tok]; ok {
		return id, true
	}
	r := []rune(tok)
	if len(r) == 1 {
		if b, ok := byteDec[r[0]]; ok {
			return int32(b), true
		}
	}
	return 0, false
}

// Token implements [Tokenizer].
func (t *Byte) Token(id int32) (string, bool) {
	switch {
	case id >= 0 && id < 256:
		return string(byteEnc[id]), true
	case id >= 256 && int(id) < 256+len(t.added):
		return t.added[id-256].Content, true
	}
	return "", false
}

// IsSpecial implements [Tokenizer].
func (t *Byte) IsSpecial(id int32) bool { return id >= 256 && int(id) < 256+len(t.added) }

// VocabSize implements [Tokenizer].
func (t *Byte) VocabSize() int { return 256 + len(t.added) }

// AddedTokens returns the added tokens in id order.
func (t *Byte) AddedTokens() []AddedToken { return append([]AddedToken(nil), t.added...) }

// MarshalJSON writes the tokenizer as a Hugging Face tokenizer.json: a
// byte-level BPE whose vocab is the 256 byte symbols (ids 0..255 in byte
// order) with no merges, a ByteLevel pre-tokenizer without regex and a
// ByteLevel decoder, so the Hugging Face libraries load it too.
func (t *Byte) MarshalJSON() ([]byte, error) {
	vocab := make(map[string]int32, 256)
	for b := 0; b < 256; b++ {
		vocab[string(byteEnc[b])] = int32(b)
	}
	return marshalByteLevelBPE(vocab, []string{}, t.added, byteLevelStep)
}

// byteLevelStep is the ByteLevel pre-tokenizer, post-processor and decoder
// step (no regex of its own).
var byteLevelStep = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}

// marshalByteLevelBPE writes a Hugging Face tokenizer.json of a byte-level
// BPE with the given vocabulary, merges, added tokens and pre-tokenizer.
func marshalByteLevelBPE(vocab map[string]int32, merges []string, added []AddedToken, preTokenizer any) ([]byte, error) {
	type hfAdded struct {
		ID         int32  `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	at := make([]hfAdded, len(added))
	for i, a := range added {
		at[i] = hfAdded{ID: a.ID, Content: a.Content, Special: a.Special}
	}
	f := map[string]any{
		"version":        "1.0",
		"truncation":     nil,
		"padding":        nil,
		"added_tokens":   at,
		"normalizer":     nil,
		"pre_tokenizer":  preTokenizer,
		"post_processor": byteLevelStep,
		"decoder":        byteLevelStep,
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil,
			"continuing_subword_prefix": nil, "end_of_word_suffix": nil,
			"fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": merges,
		},
	}
	return json.MarshalIndent(f, "", "  ")
}

// Save writes the tokenizer to path as tokenizer.json (see MarshalJSON).
func (t *Byte) Save(path string) error {
	data, err := t.MarshalJSON()
	if err != nil {
		return fmt.Errorf("tokenizer: encode: %w", err)
	}
	return SaveFile(path, append(data, '\n'))
}

// byteTokenizerFrom recognizes the tokenizer.json that [Byte.Save] writes:
// a byte-level BPE with exactly the 256 byte symbols at ids 0..255, no
// merges, and added tokens at 256, 257, ... It returns nil otherwise.
func byteTokenizerFrom(f *hfFile) *Byte {
	if f.Model.Type != "BPE" || len(f.Model.Vocab) != 256 || f.Normalizer != nil {
		return nil
	}
	var merges []json.RawMessage
	if len(f.Model.Merges) > 0 {
		if err := json.Unmarshal(f.Model.Merges, &merges); err != nil || len(merges) != 0 {
			return nil
		}
	}
	for b := 0; b < 256; b++ {
		if id, ok := f.Model.Vocab[string(byteEnc[b])]; !ok || id != int32(b) {
			return nil
		}
	}
	p := f.PreTokenizer
	if p == nil || p.Type != "ByteLevel" || p.UseRegex || p.AddPrefixSpace {
		return nil
	}
	if f.Decoder == nil || f.Decoder.Type != "ByteLevel" {
		return nil
	}
	added := make([]AddedToken, len(f.AddedTokens))
	for i, a := range f.AddedTokens {
		if a.ID != int32(256+i) || a.Content == "" || a.SingleWord || a.LStrip || a.RStrip {
			return nil
		}
		added[i] = AddedToken{ID: a.ID, Content: a.Content, Special: a.Special}
	}
	return &Byte{added: added, matcher: newAddedMatcher(added)}
}

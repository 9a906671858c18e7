// Package tokenizer turns text into token ids and back.
//
// Two implementations share one interface:
//
//   - [Byte]: a byte-level tokenizer for small models trained from scratch:
//     ids 0..255 are the bytes, followed by added (special) tokens such as
//     <|im_start|> and <|im_end|>. It is saved as an ordinary Hugging Face
//     tokenizer.json (a byte-level BPE with no merges), so the same file
//     loads here and in the Hugging Face libraries.
//   - [BPE]: a Hugging Face tokenizer.json byte-level BPE (Qwen2/Qwen3,
//     Llama 3, GPT-2 style): added tokens split out of the text, NFC
//     normalizer, Split pre-tokenizer regexes (a hand-written matcher for the
//     Qwen/Llama 3 patterns, github.com/dlclark/regexp2 for any other),
//     ByteLevel mapping, ranked merges and the ByteLevel decoder.
//
// Use [LoadFile] or [LoadDir] to read a tokenizer.json of either kind.
// Tokenizers are safe for concurrent use.
package tokenizer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sort"
	"strings"
	"unicode/utf8"
)

// Tokenizer encodes text to ids and decodes ids to text.
type Tokenizer interface {
	// Encode turns text into ids. Added tokens (special or not) written in
	// the text, e.g. "<|im_start|>", are split out and mapped to their ids,
	// as the Hugging Face library does. No BOS/EOS is added.
	Encode(text string) []int32
	// Decode turns ids into text; bytes that are not valid UTF-8 become
	// U+FFFD, one per maximal ill-formed subsequence. Unknown ids are
	// skipped.
	Decode(ids []int32) string
	// DecodeBytes returns the raw bytes of ids, without any UTF-8
	// repair, for streaming decoders that must hold back a partial
	// character.
	DecodeBytes(ids []int32) []byte
	// TokenID returns the id of a vocabulary entry or added token, given
	// as it is written in tokenizer.json (e.g. "<|im_end|>").
	TokenID(tok string) (int32, bool)
	// Token returns the vocabulary string of id (byte-level form for
	// ordinary tokens, content for added tokens).
	Token(id int32) (string, bool)
	// IsSpecial reports whether id is an added token marked special.
	IsSpecial(id int32) bool
	// VocabSize is the largest id plus one (model vocab and added tokens).
	VocabSize() int
}

// AddedToken is a token matched as a whole in the input before
// pre-tokenization (tokenizer.json "added_tokens").
type AddedToken struct {
	ID      int32  `json:"id"`
	Content string `json:"content"`
	// Special tokens (<|im_end|>) are control tokens; non-special added
	// tokens (Qwen's <tool_call>) are matched the same way.
	Special bool `json:"special"`
}

// ChatSpecialTokens are the added tokens of [NewByte]'s default chat
// vocabulary, in id order after the 256 byte ids.
var ChatSpecialTokens = []string{
	"<|endoftext|>", "<|im_start|>", "<|im_end|>",
	"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
	"<think>", "</think>",
}

// addedMatcher finds added tokens in text, leftmost-longest, like the
// Hugging Face library's aho-corasick split.
type addedMatcher struct {
	byContent map[string]int32
	// lengths[b] lists the distinct lengths (longest first) of added tokens
	// starting with byte b.
	lengths [256][]int
}

func newAddedMatcher(tokens []AddedToken) *addedMatcher {
	m := &addedMatcher{byContent: make(map[string]int32, len(tokens))}
	for _, t := range tokens {
		if t.Content == "" {
			continue
		}
		m.byContent[t.Content] = t.ID
		b := t.Content[0]
		found := false
		for _, l := range m.lengths[b] {
			if l == len(t.Content) {
				found = true
				break
			}
		}
		if !found {
			m.lengths[b] = append(m.lengths[b], len(t.Content))
		}
	}
	for b := range m.lengths {
		sort.Sort(sort.Reverse(sort.IntSlice(m.lengths[b])))
	}
	return m
}

// split calls text(s) for each run of ordinary text and added(id) for each
// added token, in order.
func (m *addedMatcher) split(s string, text func(string), added func(int32)) {
	start := 0
	for i := 0; i < len(s); i++ {
		ls := m.lengths[s[i]]
		if len(ls) == 0 {
			continue
		}
		for _, l := range ls {
			if i+l > len(s) {
				continue
			}
			if id, ok := m.byContent[s[i:i+l]]; ok {
				if start < i {
					text(s[start:i])
				}
				added(id)
				start = i + l
				i = start - 1
				break
			}
		}
	}
	if start < len(s) {
		text(s[start:])
	}
}

// bytesToUnicode is GPT-2's reversible byte → printable rune table used by
// the ByteLevel pre-tokenizer and decoder.
func bytesToUnicode() (enc [256]rune, dec map[rune]byte) {
	dec = make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			enc[b] = rune(b)
		} else {
			enc[b] = rune(256 + n)
			n++
		}
		dec[enc[b]] = byte(b)
	}
	return enc, dec
}

var byteEnc, byteDec = bytesToUnicode()

// byteLevelString maps raw bytes to their byte-level (GPT-2) string form.
func byteLevelString(s string) string {
	var sb strings.Builder
	sb.Grow(len(s) * 2)
	for i := 0; i < len(s); i++ {
		sb.WriteRune(byteEnc[s[i]])
	}
	return sb.String()
}

// byteLevelDecode appends the raw bytes of a byte-level token string. A
// token with a rune outside the byte alphabet is appended as its own UTF-8
// bytes, as the Hugging Face ByteLevel decoder does.
func byteLevelDecode(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		b, ok := byteDec[r]
		if !ok {
			return append(dst[:start], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

// lossyUTF8 converts b to a string, replacing each maximal ill-formed
// subsequence with U+FFFD (Rust's String::from_utf8_lossy).
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		c := b[i]
		if c < 0x80 {
			sb.WriteByte(c)
			i++
			continue
		}
		need, lo, hi := seqInfo(c)
		if need == 0 {
			sb.WriteRune(utf8.RuneError)
			i++
			continue
		}
		j := i + 1
		ok := true
		for k := 0; k < need; k++ {
			if j >= len(b) || b[j] < lo || b[j] > hi {
				ok = false
				break
			}
			lo, hi = 0x80, 0xBF
			j++
		}
		if ok {
			sb.Write(b[i:j])
		} else {
			sb.WriteRune(utf8.RuneError)
		}
		i = j
	}
	return sb.String()
}

// Fingerprint is a SHA-256 (hex) of t's vocabulary: every id's token
// string and whether it is special, in id order. Two tokenizers with one
// fingerprint map every id to the same token, so that token ids mean the
// same text under both (what scoring one model's tokens with another
// needs).
func Fingerprint(t Tokenizer) string {
	h := sha256.New()
	var buf [5]byte
	for id := int32(0); int(id) < t.VocabSize(); id++ {
		tok, ok := t.Token(id)
		binary.LittleEndian.PutUint32(buf[:4], uint32(len(tok)))
		buf[4] = 0
		if !ok {
			buf[4] = 2
		} else if t.IsSpecial(id) {
			buf[4] = 1
		}
		h.Write(buf[:])
		h.Write([]byte(tok))
	}
	return hex.EncodeToString(h.Sum(nil))
}

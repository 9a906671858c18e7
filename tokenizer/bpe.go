package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/text/unicode/norm"
)

// BPE is a Hugging Face tokenizer.json byte-level BPE tokenizer.
type BPE struct {
	vocab       map[string]int32 // byte-level token string → id
	tokens      []string         // id → token string (model vocab and added)
	raw         [][]byte         // id → decoded bytes (nil for unused ids)
	special     []bool           // id → added token marked special
	added       *addedMatcher
	addedTokens []AddedToken
	nfc         bool
	split       splitter
	// byteID maps each byte to the id of its single-byte token (-1 if none).
	byteID       [256]int32
	merges       map[uint64]uint64 // pair(a,b) → rank<<32 | merged id
	ignoreMerges bool

	// cache maps a raw pre-token to its ids.
	mu         sync.RWMutex
	cache      map[string][]int32
	cacheBytes int
}

// The pre-token cache is emptied when it holds more than maxCacheBytes of
// keys and ids; pre-tokens longer than maxCachedWord are not cached.
const (
	maxCacheBytes = 64 << 20
	maxCachedWord = 16 << 10
)

// hfFile is the part of tokenizer.json this package reads.
type hfFile struct {
	AddedTokens []struct {
		ID         int32  `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer    *hfComponent `json:"normalizer"`
	PreTokenizer  *hfComponent `json:"pre_tokenizer"`
	Decoder       *hfComponent `json:"decoder"`
	PostProcessor *hfComponent `json:"post_processor"`
	Model         struct {
		Type                    string           `json:"type"`
		Vocab                   map[string]int32 `json:"vocab"`
		Merges                  json.RawMessage  `json:"merges"`
		IgnoreMerges            bool             `json:"ignore_merges"`
		ByteFallback            bool             `json:"byte_fallback"`
		ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
		Dropout                 *float64         `json:"dropout"`
	} `json:"model"`
}

type hfComponent struct {
	Type          string         `json:"type"`
	Normalizers   []*hfComponent `json:"normalizers"`
	Pretokenizers []*hfComponent `json:"pretokenizers"`
	Pattern       *struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior       string `json:"behavior"`
	Invert         bool   `json:"invert"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       bool   `json:"use_regex"`
}

// LoadFile reads a Hugging Face tokenizer.json. A byte-level BPE with no
// merges whose first 256 ids are the bytes (what [Byte.Save] writes) loads
// as a [*Byte]; any other byte-level BPE loads as a [*BPE].
func LoadFile(path string) (Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// Parse reads tokenizer.json content; see [LoadFile].
func Parse(data []byte) (Tokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	if b := byteTokenizerFrom(&f); b != nil {
		return b, nil
	}
	return newBPE(&f)
}

// ParseBPE reads tokenizer.json content as a [*BPE] (never a [*Byte]).
func ParseBPE(data []byte) (*BPE, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	return newBPE(&f)
}

func newBPE(f *hfFile) (*BPE, error) {
	if f.Model.Type != "BPE" && f.Model.Type != "" {
		return nil, fmt.Errorf("model type %q is not supported (only byte-level BPE)", f.Model.Type)
	}
	if f.Model.ByteFallback {
		return nil, fmt.Errorf("byte_fallback BPE (SentencePiece-style) is not supported")
	}
	if p := f.Model.ContinuingSubwordPrefix; p != nil && *p != "" {
		return nil, fmt.Errorf("continuing_subword_prefix %q is not supported", *p)
	}
	if p := f.Model.EndOfWordSuffix; p != nil && *p != "" {
		return nil, fmt.Errorf("end_of_word_suffix %q is not supported", *p)
	}
	t := &BPE{
		vocab:        f.Model.Vocab,
		ignoreMerges: f.Model.IgnoreMerges,
		cache:        make(map[string][]int32),
	}
	if err := t.setNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.setPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if f.Decoder != nil && f.Decoder.Type != "ByteLevel" {
		return nil, fmt.Errorf("decoder %q is not supported (only ByteLevel)", f.Decoder.Type)
	}
	size := 0
	for _, id := range t.vocab {
		if int(id)+1 > size {
			size = int(id) + 1
		}
	}
	for _, a := range f.AddedTokens {
		if a.SingleWord || a.LStrip || a.RStrip {
			return nil, fmt.Errorf("added token %q: single_word/lstrip/rstrip are not supported", a.Content)
		}
		if int(a.ID)+1 > size {
			size = int(a.ID) + 1
		}
		t.addedTokens = append(t.addedTokens, AddedToken{ID: a.ID, Content: a.Content, Special: a.Special})
	}
	t.tokens = make([]string, size)
	t.special = make([]bool, size)
	for s, id := range t.vocab {
		if id < 0 {
			return nil, fmt.Errorf("negative id %d for %q", id, s)
		}
		t.tokens[id] = s
	}
	for _, a := range t.addedTokens {
		t.tokens[a.ID] = a.Content
		t.special[a.ID] = a.Special
	}
	t.added = newAddedMatcher(t.addedTokens)
	t.raw = make([][]byte, size)
	for id, s := range t.tokens {
		if s != "" {
			t.raw[id] = byteLevelDecode(nil, s)
		}
	}
	for b := 0; b < 256; b++ {
		id, ok := t.vocab[string(byteEnc[b])]
		if !ok {
			id = -1
		}
		t.byteID[b] = id
	}
	if err := t.setMerges(f.Model.Merges); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *BPE) setNormalizer(n *hfComponent) error {
	if n == nil {
		return nil
	}
	switch n.Type {
	case "NFC":
		t.nfc = true
	case "Sequence":
		for _, c := range n.Normalizers {
			if err := t.setNormalizer(c); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("normalizer %q is not supported (only NFC)", n.Type)
	}
	return nil
}

func (t *BPE) setPreTokenizer(p *hfComponent) error {
	if p == nil {
		return fmt.Errorf("no pre_tokenizer: only byte-level tokenizers are supported")
	}
	var parts []*hfComponent
	if p.Type == "Sequence" {
		parts = p.Pretokenizers
	} else {
		parts = []*hfComponent{p}
	}
	byteLevel := false
	for _, c := range parts {
		switch c.Type {
		case "Split":
			if t.split != nil {
				return fmt.Errorf("more than one Split pre-tokenizer is not supported")
			}
			if c.Behavior != "Isolated" || c.Invert {
				return fmt.Errorf("Split behavior %q invert=%v is not supported", c.Behavior, c.Invert)
			}
			if c.Pattern == nil || c.Pattern.Regex == nil {
				return fmt.Errorf("Split without a Regex pattern is not supported")
			}
			s, err := newSplitter(*c.Pattern.Regex)
			if err != nil {
				return err
			}
			t.split = s
		case "ByteLevel":
			byteLevel = true
			if c.AddPrefixSpace {
				return fmt.Errorf("ByteLevel add_prefix_space is not supported")
			}
			if c.UseRegex {
				if t.split != nil {
					return fmt.Errorf("ByteLevel use_regex after Split is not supported")
				}
				s, err := newSplitter(patternGPT2)
				if err != nil {
					return err
				}
				t.split = s
			}
		default:
			return fmt.Errorf("pre-tokenizer %q is not supported", c.Type)
		}
	}
	if !byteLevel {
		return fmt.Errorf("pre-tokenizer has no ByteLevel step: only byte-level BPE is supported")
	}
	return nil
}

// patternGPT2 is the ByteLevel pre-tokenizer's own regex (use_regex).
const patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

func (t *BPE) setMerges(raw json.RawMessage) error {
	var pairs [][2]string
	if len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		var any []json.RawMessage
		if err := json.Unmarshal(raw, &any); err != nil {
			return fmt.Errorf("merges: %w", err)
		}
		pairs = make([][2]string, len(any))
		for i, m := range any {
			m = bytes.TrimSpace(m)
			if len(m) > 0 && m[0] == '"' {
				var s string
				if err := json.Unmarshal(m, &s); err != nil {
					return fmt.Errorf("merge %d: %w", i, err)
				}
				a, b, ok := strings.Cut(s, " ")
				if !ok {
					return fmt.Errorf("merge %d %q: no space", i, s)
				}
				pairs[i] = [2]string{a, b}
				continue
			}
			var arr []string
			if err := json.Unmarshal(m, &arr); err != nil || len(arr) != 2 {
				return fmt.Errorf("merge %d: want \"a b\" or [\"a\",\"b\"]: %s", i, m)
			}
			pairs[i] = [2]string{arr[0], arr[1]}
		}
	}
	t.merges = make(map[uint64]uint64, len(pairs))
	for rank, p := range pairs {
		a, ok1 := t.vocab[p[0]]
		b, ok2 := t.vocab[p[1]]
		m, ok3 := t.vocab[p[0]+p[1]]
		if !ok1 || !ok2 || !ok3 {
			return fmt.Errorf("merge %d (%q %q): token not in vocab", rank, p[0], p[1])
		}
		key := uint64(uint32(a))<<32 | uint64(uint32(b))
		if _, dup := t.merges[key]; dup {
			continue // the first (lowest) rank wins
		}
		t.merges[key] = uint64(rank)<<32 | uint64(uint32(m))
	}
	return nil
}

// Encode implements [Tokenizer].
func (t *BPE) Encode(text string) []int32 {
	ids := make([]int32, 0, len(text)/3+4)
	t.added.split(text,
		func(s string) { ids = t.appendText(ids, s) },
		func(id int32) { ids = append(ids, id) })
	return ids
}

// appendText encodes text that holds no added token.
func (t *BPE) appendText(ids []int32, s string) []int32 {
	if t.nfc && !isASCII(s) {
		s = norm.NFC.String(s)
	}
	if t.split == nil {
		return t.appendWord(ids, s)
	}
	t.split.split(s, func(p string) { ids = t.appendWord(ids, p) })
	return ids
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// appendWord encodes one pre-token, through the cache.
func (t *BPE) appendWord(ids []int32, w string) []int32 {
	if len(w) == 1 {
		if id := t.byteID[w[0]]; id >= 0 {
			return append(ids, id)
		}
	}
	t.mu.RLock()
	c, ok := t.cache[w]
	t.mu.RUnlock()
	if ok {
		return append(ids, c...)
	}
	start := len(ids)
	ids = t.bpe(ids, w)
	if len(w) <= maxCachedWord {
		c := append([]int32(nil), ids[start:]...)
		size := len(w) + 4*len(c) + 64
		t.mu.Lock()
		if t.cacheBytes+size > maxCacheBytes {
			clear(t.cache)
			t.cacheBytes = 0
		}
		t.cache[strings.Clone(w)] = c
		t.cacheBytes += size
		t.mu.Unlock()
	}
	return ids
}

// symbol is one node of the doubly linked list of a word being merged.
type symbol struct {
	id         int32
	prev, next int32 // indexes, -1 at the ends
	dead       bool
}

type mergeItem struct {
	rank uint32
	pos  int32 // index of the left symbol
	id   int32 // merged id
}

// mergeHeap is a binary min-heap of merges by (rank, pos).
type mergeHeap []mergeItem

func (a mergeItem) less(b mergeItem) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

func (h *mergeHeap) push(x mergeItem) {
	*h = append(*h, x)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeItem {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s[r].less(s[l]) {
			m = r
		}
		if !s[m].less(s[i]) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// bpe runs the byte-level BPE merges on raw bytes w, the way the Hugging
// Face library's Word::merge_all does (lowest rank first, leftmost on ties).
func (t *BPE) bpe(ids []int32, w string) []int32 {
	if t.ignoreMerges {
		if id, ok := t.vocab[byteLevelString(w)]; ok {
			return append(ids, id)
		}
	}
	syms := make([]symbol, 0, len(w))
	for i := 0; i < len(w); i++ {
		id := t.byteID[w[i]]
		if id < 0 {
			continue // no unk token: the byte is dropped, as HF does
		}
		syms = append(syms, symbol{id: id, prev: int32(len(syms)) - 1, next: int32(len(syms)) + 1})
	}
	if len(syms) == 0 {
		return ids
	}
	syms[len(syms)-1].next = -1
	if len(syms) > 1 {
		h := make(mergeHeap, 0, len(syms))
		for i := 0; i+1 < len(syms); i++ {
			if m, ok := t.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
				h.push(mergeItem{rank: uint32(m >> 32), pos: int32(i), id: int32(uint32(m))})
			}
		}
		for len(h) > 0 {
			it := h.pop()
			s := &syms[it.pos]
			if s.dead || s.next < 0 {
				continue
			}
			// Like HF: an entry is current if the pair now at pos merges to
			// the same id.
			if m, ok := t.merges[pairKey(s.id, syms[s.next].id)]; !ok || int32(uint32(m)) != it.id {
				continue
			}
			nx := s.next
			s.id = it.id
			syms[nx].dead = true
			s.next = syms[nx].next
			if s.next >= 0 {
				syms[s.next].prev = it.pos
			}
			if s.prev >= 0 {
				p := &syms[s.prev]
				if m, ok := t.merges[pairKey(p.id, s.id)]; ok {
					h.push(mergeItem{rank: uint32(m >> 32), pos: s.prev, id: int32(uint32(m))})
				}
			}
			if s.next >= 0 {
				n := &syms[s.next]
				if m, ok := t.merges[pairKey(s.id, n.id)]; ok {
					h.push(mergeItem{rank: uint32(m >> 32), pos: it.pos, id: int32(uint32(m))})
				}
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		ids = append(ids, syms[i].id)
	}
	return ids
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// Decode implements [Tokenizer].
func (t *BPE) Decode(ids []int32) string { return lossyUTF8(t.DecodeBytes(ids)) }

// DecodeBytes implements [Tokenizer].
func (t *BPE) DecodeBytes(ids []int32) []byte {
	out := make([]byte, 0, len(ids)*4)
	for _, id := range ids {
		if id >= 0 && int(id) < len(t.raw) {
			out = append(out, t.raw[id]...)
		}
	}
	return out
}

// TokenID implements [Tokenizer].
func (t *BPE) TokenID(tok string) (int32, bool) {
	if id, ok := t.added.byContent[tok]; ok {
		return id, true
	}
	id, ok := t.vocab[tok]
	return id, ok
}

// Token implements [Tokenizer].
func (t *BPE) Token(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.tokens) || t.tokens[id] == "" {
		return "", false
	}
	return t.tokens[id], true
}

// IsSpecial implements [Tokenizer].
func (t *BPE) IsSpecial(id int32) bool {
	return id >= 0 && int(id) < len(t.special) && t.special[id]
}

// VocabSize implements [Tokenizer].
func (t *BPE) VocabSize() int { return len(t.tokens) }

// AddedTokens returns the added tokens in tokenizer.json order.
func (t *BPE) AddedTokens() []AddedToken { return append([]AddedToken(nil), t.addedTokens...) }

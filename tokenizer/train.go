package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// TrainBPE learns a byte-level BPE from texts for a model trained from
// scratch: the 256 bytes (ids 0..255, as in [Byte]), then up to merges
// merges (each a new token unless two splits of one string meet) (ids 256...), then the special tokens (all special; default
// [ChatSpecialTokens]), which are cut out of the texts and never merged.
// Pre-tokenization is Qwen's: words with their leading space or symbol,
// punctuation runs, and every digit on its own, so numbers stay digit
// sequences a small model can copy. Merging stops early when no pair
// occurs twice. Ties are broken by the pair's bytes, so the result is
// deterministic.
//
// It returns the tokenizer.json content (Hugging Face format, loadable by
// [Parse] and by the Hugging Face libraries).
func TrainBPE(texts []string, merges int, specials ...string) ([]byte, error) {
	if merges < 0 {
		return nil, errors.New("tokenizer: train: negative number of merges")
	}
	if len(specials) == 0 {
		specials = ChatSpecialTokens
	}
	special, err := NewByte(specials...) // validates them and finds them in text
	if err != nil {
		return nil, err
	}
	// Word frequencies over the pre-tokens of the ordinary text.
	freq := map[string]int{}
	split := fastSplitter{maxDigits: 1}
	for _, t := range texts {
		special.matcher.split(t, func(s string) {
			split.split(s, func(w string) { freq[w]++ })
		}, func(int32) {})
	}
	type word struct {
		syms []int32
		n    int
	}
	words := make([]word, 0, len(freq))
	keys := make([]string, 0, len(freq))
	for w := range freq {
		keys = append(keys, w)
	}
	sort.Strings(keys)
	for _, w := range keys {
		syms := make([]int32, len(w))
		for i := 0; i < len(w); i++ {
			syms[i] = int32(w[i])
		}
		words = append(words, word{syms, freq[w]})
	}
	tokens := make([]string, 256, 256+merges) // byte-level strings
	for b := range 256 {
		tokens[b] = string(byteEnc[b])
	}
	var mergeList []string
	for len(mergeList) < merges {
		counts := map[uint64]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				counts[pairKey(w.syms[i], w.syms[i+1])] += w.n
			}
		}
		var best uint64
		bestN := 1
		for k, n := range counts {
			if n > bestN || (n == bestN && n > 1 && tokens[k>>32]+tokens[uint32(k)] < tokens[best>>32]+tokens[uint32(best)]) {
				best, bestN = k, n
			}
		}
		if bestN < 2 {
			break
		}
		a, b := int32(best>>32), int32(uint32(best))
		id := int32(len(tokens))
		if i, dup := indexOf(tokens, tokens[a]+tokens[b]); dup {
			id = int32(i) // another split of a string already merged: same token
		} else {
			tokens = append(tokens, tokens[a]+tokens[b])
		}
		mergeList = append(mergeList, tokens[a]+" "+tokens[b])
		for wi := range words {
			s := words[wi].syms
			out := s[:0]
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == a && s[i+1] == b {
					out = append(out, id)
					i++
					continue
				}
				out = append(out, s[i])
			}
			words[wi].syms = out
		}
	}
	vocab := make(map[string]int32, len(tokens))
	for id, s := range tokens {
		vocab[s] = int32(id)
	}
	added := make([]AddedToken, len(specials))
	for i, sp := range specials {
		added[i] = AddedToken{ID: int32(len(tokens) + i), Content: sp, Special: true}
	}
	data, err := marshalByteLevelBPE(vocab, mergeList, added, map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]string{"Regex": patternQwen}, "behavior": "Isolated", "invert": false},
		byteLevelStep,
	}})
	if err != nil {
		return nil, fmt.Errorf("tokenizer: train: %w", err)
	}
	if _, err := ParseBPE(data); err != nil { // what we write must load
		return nil, fmt.Errorf("tokenizer: train: result does not load: %w", err)
	}
	return append(data, '\n'), nil
}

func indexOf(tokens []string, s string) (int, bool) {
	for i, t := range tokens {
		if t == s {
			return i, true
		}
	}
	return -1, false
}

// SaveFile writes tokenizer.json content to path, creating its directory.
func SaveFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("tokenizer: save: %w", err)
	}
	return nil
}

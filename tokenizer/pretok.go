package tokenizer

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// splitter cuts normalized text into pre-tokens (Split pre-tokenizer with
// behavior "Isolated": matches and the gaps between them are pieces).
type splitter interface {
	split(s string, piece func(string))
}

// The known split patterns, handled by a hand-written matcher. The only
// difference between them is the run length of \p{N}.
const (
	// Qwen2/Qwen2.5/Qwen3.
	patternQwen = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Llama 3 / cl100k.
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

func newSplitter(pattern string) (splitter, error) {
	switch pattern {
	case patternQwen:
		return fastSplitter{maxDigits: 1}, nil
	case patternLlama3:
		return fastSplitter{maxDigits: 3}, nil
	}
	re, err := regexp2.Compile(pattern, regexp2.Unicode)
	if err != nil {
		// .NET-style syntax may reject Unicode-mode escapes; try plain.
		re2, err2 := regexp2.Compile(pattern, regexp2.None)
		if err2 != nil {
			return nil, fmt.Errorf("tokenizer: compile split pattern %q: %w", pattern, err)
		}
		re = re2
	}
	return regexSplitter{re: re}, nil
}

// regexSplitter is the general fallback for any Split regex.
type regexSplitter struct{ re *regexp2.Regexp }

func (r regexSplitter) split(s string, piece func(string)) {
	// regexp2 reports rune offsets; map them back to byte offsets.
	runes := []rune(s)
	byteOff := make([]int, len(runes)+1)
	off := 0
	for i, rr := range runes {
		byteOff[i] = off
		off += utf8.RuneLen(rr)
		if rr == utf8.RuneError {
			// Invalid bytes became U+FFFD; offsets may drift. Fall back to a
			// single piece for such input.
			piece(s)
			return
		}
	}
	byteOff[len(runes)] = off
	last := 0
	m, err := r.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		st, en := m.Index, m.Index+m.Length
		if st > last {
			piece(s[byteOff[last]:byteOff[st]])
		}
		if en > st {
			piece(s[byteOff[st]:byteOff[en]])
		}
		last = en
		m, err = r.re.FindNextMatch(m)
	}
	if last < len(runes) {
		piece(s[byteOff[last]:])
	}
}

// fastSplitter implements patternQwen / patternLlama3 by hand, with the
// same leftmost-first alternation and backtracking results:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,maxDigits}
//	| ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
//
// \s is Unicode White_Space, \p{L} letters, \p{N} numbers.
type fastSplitter struct{ maxDigits int }

type runeClass uint8

const (
	clOther runeClass = iota
	clLetter
	clNumber
	clSpace // White_Space other than \r \n
	clNewline
)

func classify(r rune) runeClass {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return clLetter
	case unicode.IsNumber(r):
		return clNumber
	case unicode.IsSpace(r):
		return clSpace
	}
	return clOther
}

var asciiClass = func() (t [utf8.RuneSelf]runeClass) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		switch {
		case r == '\r' || r == '\n':
			t[r] = clNewline
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
			t[r] = clLetter
		case r >= '0' && r <= '9':
			t[r] = clNumber
		case r == ' ' || r == '\t' || r == '\v' || r == '\f':
			t[r] = clSpace
		default:
			t[r] = clOther
		}
	}
	return t
}()

// at decodes the rune at i (invalid bytes are one clOther "rune").
func at(s string, i int) (runeClass, rune, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], rune(c), 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n <= 1 {
		return clOther, r, 1
	}
	return classify(r), r, n
}

func isWS(c runeClass) bool { return c == clSpace || c == clNewline }

func (f fastSplitter) split(s string, piece func(string)) {
	for i := 0; i < len(s); {
		n := f.match(s, i)
		piece(s[i : i+n])
		i += n
	}
}

// match returns the byte length of the match starting at i (always > 0).
func (f fastSplitter) match(s string, i int) int {
	c, r, w := at(s, i)
	// 1. contractions.
	if r == '\'' && i+1 < len(s) {
		if n := contraction(s[i+1:]); n > 0 {
			return 1 + n
		}
	}
	// 2. [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clLetter {
		return w + f.letters(s, i+w) - i - w
	}
	if c == clOther || c == clSpace {
		if i+w < len(s) {
			if c2, _, _ := at(s, i+w); c2 == clLetter {
				return f.letters(s, i+w) - i
			}
		}
	}
	// 3. \p{N}{1,max}
	if c == clNumber {
		j := i + w
		for k := 1; k < f.maxDigits && j < len(s); k++ {
			c2, _, w2 := at(s, j)
			if c2 != clNumber {
				break
			}
			j += w2
		}
		return j - i
	}
	// 4. ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := i
	if r == ' ' {
		j++
	}
	if j < len(s) {
		if c2, _, _ := at(s, j); c2 == clOther {
			for j < len(s) {
				c3, _, w3 := at(s, j)
				if c3 != clOther {
					break
				}
				j += w3
			}
			for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
				j++
			}
			return j - i
		}
	}
	// Only whitespace is left (c is clSpace or clNewline).
	// Find the whitespace run [i, end) and its last \r or \n.
	end := i
	lastNL := -1
	prev := i // start of the last rune in the run
	for end < len(s) {
		c3, _, w3 := at(s, end)
		if !isWS(c3) {
			break
		}
		if c3 == clNewline {
			lastNL = end
		}
		prev = end
		end += w3
	}
	// 5. \s*[\r\n]+
	if lastNL >= 0 {
		return lastNL + 1 - i
	}
	// 6. \s+(?!\S)
	if end == len(s) || prev == i {
		// At the end of text the whole run matches; a one-rune run followed
		// by non-space fails 6 and matches 7 with the same length.
		return end - i
	}
	return prev - i
}

// letters returns the end of the \p{L}+ run starting at j.
func (f fastSplitter) letters(s string, j int) int {
	for j < len(s) {
		c := s[j]
		if c < utf8.RuneSelf {
			if asciiClass[c] != clLetter {
				return j
			}
			j++
			continue
		}
		c2, _, w := at(s, j)
		if c2 != clLetter {
			return j
		}
		j += w
	}
	return j
}

// contraction matches (?i:s|t|re|ve|m|ll|d) at the start of s (after the
// apostrophe) and returns its byte length or 0. Case folding includes
// U+017F LATIN SMALL LETTER LONG S for s.
func contraction(s string) int {
	lower := func(i int) (rune, int) {
		if i >= len(s) {
			return 0, 0
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == 'ſ' {
			return 's', n
		}
		return unicode.ToLower(r), n
	}
	r, n := lower(0)
	switch r {
	case 's', 't', 'm', 'd':
		return n
	case 'r', 'v':
		if r2, n2 := lower(n); r2 == 'e' {
			return n + n2
		}
	case 'l':
		if r2, n2 := lower(n); r2 == 'l' {
			return n + n2
		}
	}
	return 0
}

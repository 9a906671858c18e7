package tokenizer

// StreamDecoder turns ids into text incrementally, for streaming replies:
// text is released only up to a character boundary, so a character whose
// bytes are split over several tokens comes out whole. Concatenating every
// Add result and the final Flush equals Decode of all the ids.
// A StreamDecoder is not safe for concurrent use.
type StreamDecoder struct {
	tok Tokenizer
	buf []byte
}

// NewStreamDecoder returns a StreamDecoder over tok.
func NewStreamDecoder(tok Tokenizer) *StreamDecoder { return &StreamDecoder{tok: tok} }

// Add decodes ids and returns the text that is now complete.
func (d *StreamDecoder) Add(ids ...int32) string {
	d.buf = append(d.buf, d.tok.DecodeBytes(ids)...)
	keep := incompleteTail(d.buf)
	out := lossyUTF8(d.buf[:len(d.buf)-keep])
	d.buf = append(d.buf[:0], d.buf[len(d.buf)-keep:]...)
	return out
}

// Flush returns what is held back (an unfinished character becomes U+FFFD)
// and resets the decoder.
func (d *StreamDecoder) Flush() string {
	out := lossyUTF8(d.buf)
	d.buf = d.buf[:0]
	return out
}

// incompleteTail returns the length of a trailing UTF-8 sequence that is a
// valid but unfinished prefix of a character (0 if there is none).
func incompleteTail(b []byte) int {
	for n := 1; n <= 3 && n <= len(b); n++ {
		c := b[len(b)-n]
		if c < 0x80 {
			return 0
		}
		if c < 0xC0 {
			continue // continuation byte: look further back
		}
		need, lo, hi := seqInfo(c)
		if need == 0 || n > need {
			return 0
		}
		// Check the continuation bytes present.
		for k := 1; k < n; k++ {
			x := b[len(b)-n+k]
			if x < lo || x > hi {
				return 0
			}
			lo, hi = 0x80, 0xBF
		}
		if n <= need { // fewer than need+1 bytes: unfinished
			return n
		}
		return 0
	}
	return 0
}

// seqInfo returns how many continuation bytes lead byte c needs and the
// allowed range of the first one (need 0: c cannot start a sequence).
func seqInfo(c byte) (need int, lo, hi byte) {
	lo, hi = 0x80, 0xBF
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	}
	return need, lo, hi
}

// Package fastjson reads and writes, without reflection, the JSON that
// grows with a conversation: the harness's Chat Completions request, the
// upstream's answer with its prompt's token ids, the model_request event
// (written here, located by the store's codec, read back by samples).
// At a long conversation's 100th call these are megabytes, which
// encoding/json reads several times slower; what stays small is left to
// encoding/json.
//
// Its decoders are fast paths, not replacements: a Scanner accepts a
// subset of what encoding/json accepts and reports failure (ok == false)
// on anything else — a syntax error, but also anything it does not
// handle exactly as encoding/json would (invalid UTF-8 or a lone
// surrogate escape in a string it decodes, a duplicated or case-folded
// key, nesting deeper than encoding/json allows). Callers then decode the
// same bytes with encoding/json, which yields its usual result or error.
// So a document either decodes here to exactly what encoding/json would
// produce, or is handed to encoding/json; tests check that property by
// fuzzing both. Skip and Raw validate as encoding/json does, no more.
package fastjson

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// maxDepth bounds nesting in Skip: values at depth 0 (the document) to
// maxDepth, so at most 10000 nested arrays and objects, as encoding/json.
const maxDepth = 9999

// Scanner reads one JSON document. The zero value is not usable; use New.
// After any method reports !ok the scanner is spent.
type Scanner struct {
	data []byte
	pos  int
}

// New returns a scanner over data.
func New(data []byte) *Scanner { return &Scanner{data: data} }

func (s *Scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end).
func (s *Scanner) peek() byte {
	s.ws()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// Offset is the position in the data of the next byte to read: after a
// value is read, the end of that value.
func (s *Scanner) Offset() int { return s.pos }

// End reports whether only white space remains.
func (s *Scanner) End() bool {
	s.ws()
	return s.pos == len(s.data)
}

// Null consumes a null literal if one is next.
func (s *Scanner) Null() bool {
	if s.peek() == 'n' && bytes.HasPrefix(s.data[s.pos:], []byte("null")) {
		s.pos += 4
		return true
	}
	return false
}

// Bool reads true or false.
func (s *Scanner) Bool() (v, ok bool) {
	switch s.peek() {
	case 't':
		if bytes.HasPrefix(s.data[s.pos:], []byte("true")) {
			s.pos += 4
			return true, true
		}
	case 'f':
		if bytes.HasPrefix(s.data[s.pos:], []byte("false")) {
			s.pos += 5
			return false, true
		}
	}
	return false, false
}

// number scans a JSON number and returns its text; isInt is set when it
// has neither fraction nor exponent.
func (s *Scanner) number() (text []byte, isInt, ok bool) {
	s.ws()
	d, start := s.data, s.pos
	i := start
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return nil, false, false
	}
	isInt = true
	if i < len(d) && d[i] == '.' {
		isInt = false
		i++
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == j {
			return nil, false, false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		isInt = false
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == j {
			return nil, false, false
		}
	}
	s.pos = i
	return d[start:i], isInt, true
}

// Int reads an integer that fits in bits bits (as encoding/json decodes
// into intN: a fraction or exponent is a type error).
func (s *Scanner) Int(bits int) (int64, bool) {
	t, isInt, ok := s.number()
	if !ok || !isInt {
		return 0, false
	}
	if len(t) <= 18 {
		// Cannot overflow int64: no need for strconv.
		var v int64
		neg := t[0] == '-'
		if neg {
			t = t[1:]
		}
		for _, c := range t {
			v = v*10 + int64(c-'0')
		}
		if neg {
			v = -v
		}
		if bits < 64 && (v < -1<<(bits-1) || v >= 1<<(bits-1)) {
			return 0, false
		}
		return v, true
	}
	v, err := strconv.ParseInt(string(t), 10, bits)
	return v, err == nil
}

// Float reads a number as a float of bits bits (32 or 64).
func (s *Scanner) Float(bits int) (float64, bool) {
	t, _, ok := s.number()
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(unsafe.String(&t[0], len(t)), bits)
	return v, err == nil
}

// String reads a string.
func (s *Scanner) String() (string, bool) {
	b, fresh, ok := s.str(true)
	if fresh {
		// b is the scanner's own new buffer: no need to copy it again.
		return unsafe.String(unsafe.SliceData(b), len(b)), ok
	}
	return string(b), ok
}

// StringOrNull reads a string into *v, or null, which leaves *v alone.
func (s *Scanner) StringOrNull(v *string) bool {
	if s.Null() {
		return true
	}
	var ok bool
	*v, ok = s.String()
	return ok
}

// RawString reads any value as Raw does; when it is a string, str is
// also that string decoded (isString true), in the same pass, and ok is
// false where String's is.
func (s *Scanner) RawString() (raw []byte, str string, isString, ok bool) {
	if s.peek() != '"' {
		raw, ok = s.Raw()
		return raw, "", false, ok
	}
	start := s.pos
	str, ok = s.String()
	return s.data[start:s.pos], str, true, ok
}

// strPlain marks the bytes a string holds as they are: ASCII but for
// control characters, quote and backslash.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads a string, unescaped when build; without escapes it returns a
// slice of the input, else a new buffer (fresh). Without build it checks
// the string only as encoding/json's validation does (escapes, control
// characters; not UTF-8 nor surrogate pairs, which only decoding
// changes) and returns its text as written.
func (s *Scanner) str(build bool) (v []byte, fresh, ok bool) {
	if s.peek() != '"' {
		return nil, false, false
	}
	d := s.data
	i := s.pos + 1
	start := i
	ascii := true
	for {
		if i >= len(d) {
			return nil, false, false
		}
		c := d[i]
		if strPlain[c] {
			i++
			continue
		}
		if c == '"' {
			if build && !ascii && !utf8.Valid(d[start:i]) {
				return nil, false, false
			}
			s.pos = i + 1
			return d[start:i], false, true
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return nil, false, false
		}
		if c >= 0x80 {
			ascii = false
		}
		i++
	}
	// Escapes: copy into a buffer of the escaped length (no longer than
	// the decoded text).
	if build && !ascii && !utf8.Valid(d[start:i]) {
		return nil, false, false
	}
	var buf []byte
	if build {
		end := i
		for end < len(d) && d[end] != '"' {
			if d[end] == '\\' {
				end++
			}
			end++
		}
		buf = make([]byte, 0, min(end, len(d))-start)
		buf = append(buf, d[start:i]...)
	}
	for {
		if i >= len(d) {
			return nil, false, false
		}
		c := d[i]
		switch {
		case c == '"':
			s.pos = i + 1
			if !build {
				return d[start:i], false, true
			}
			return buf, true, true
		case c < 0x20:
			return nil, false, false
		case c == '\\':
			if i+1 >= len(d) {
				return nil, false, false
			}
			var e byte
			switch d[i+1] {
			case '"', '\\', '/':
				e = d[i+1]
			case 'b':
				e = '\b'
			case 'f':
				e = '\f'
			case 'n':
				e = '\n'
			case 'r':
				e = '\r'
			case 't':
				e = '\t'
			case 'u':
				r, ok := hex4(d, i+2)
				if !ok {
					return nil, false, false
				}
				i += 6
				if build && utf16.IsSurrogate(r) {
					// Only a valid pair is decoded here.
					if i+1 >= len(d) || d[i] != '\\' || d[i+1] != 'u' {
						return nil, false, false
					}
					r2, ok := hex4(d, i+2)
					if !ok {
						return nil, false, false
					}
					dec := utf16.DecodeRune(r, r2)
					if dec == utf8.RuneError {
						return nil, false, false
					}
					r = dec
					i += 6
				}
				if build {
					buf = utf8.AppendRune(buf, r)
				}
				continue
			default:
				return nil, false, false
			}
			if build {
				buf = append(buf, e)
			}
			i += 2
		default:
			j := i
			for i < len(d) && (strPlain[d[i]] || d[i] >= 0x80) {
				if d[i] >= 0x80 {
					ascii = false
				}
				i++
			}
			if build {
				if !ascii && !utf8.Valid(d[j:i]) {
					return nil, false, false
				}
				buf = append(buf, d[j:i]...)
			}
		}
	}
}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}

// Skip validates and skips one value.
func (s *Scanner) Skip() bool { return s.skip(0) }

func (s *Scanner) skip(depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch s.peek() {
	case '{':
		o, ok := s.Object()
		if !ok {
			return false
		}
		for {
			_, more := o.next(false)
			if !more {
				return o.ok
			}
			if !s.skip(depth + 1) {
				return false
			}
		}
	case '[':
		a, ok := s.Array()
		if !ok {
			return false
		}
		for a.Next() {
			if !s.skip(depth + 1) {
				return false
			}
		}
		return a.OK()
	case '"':
		_, _, ok := s.str(false)
		return ok
	case 't', 'f':
		_, ok := s.Bool()
		return ok
	case 'n':
		return s.Null()
	default:
		_, _, ok := s.number()
		return ok
	}
}

// Raw validates and skips one value and returns its bytes, as
// json.RawMessage would hold them.
func (s *Scanner) Raw() ([]byte, bool) {
	s.ws()
	start := s.pos
	if !s.Skip() {
		return nil, false
	}
	return s.data[start:s.pos], true
}

// Object iterates over an object's members.
type Object struct {
	s    *Scanner
	n    int
	ok   bool
	seen uint64
}

// Object starts reading an object.
func (s *Scanner) Object() (Object, bool) {
	if s.peek() != '{' {
		return Object{}, false
	}
	s.pos++
	return Object{s: s, ok: true}, true
}

// Keys reads an object's keys, which must be among known (at most 64):
// it returns the index of the next key in known, -1 at the end (or on an
// error: see OK). An unknown key that encoding/json would match to a known
// one (it folds case), or a repeated key, is an error here; other unknown
// keys are skipped, values and all.
func (o *Object) Keys(known ...string) int {
	for {
		k, more := o.next(true)
		if !more {
			return -1
		}
		for i, name := range known {
			if string(k) == name {
				if o.seen&(1<<i) != 0 {
					o.ok = false
					return -1
				}
				o.seen |= 1 << i
				return i
			}
		}
		for _, name := range known {
			if bytes.EqualFold(k, []byte(name)) {
				o.ok = false
				return -1
			}
		}
		if !o.s.Skip() {
			o.ok = false
			return -1
		}
	}
}

// Next reads the next member's key, as written (escapes left as they are),
// and its colon, for the caller to read its value; false at the closing
// brace or on an error (see OK). Unlike Keys, it reads any keys, repeated
// or not: what it reads is not what encoding/json would decode into a
// struct, but the members as written.
func (o *Object) Next() ([]byte, bool) { return o.next(false) }

// OK reports whether the object was read to its end without error.
func (o *Object) OK() bool { return o.ok }

// next reads the next key, decoded when build, and its colon; false at the
// closing brace or on an error (o.ok false).
func (o *Object) next(build bool) ([]byte, bool) {
	s := o.s
	if !o.ok {
		return nil, false
	}
	c := s.peek()
	if c == '}' {
		s.pos++
		return nil, false
	}
	if o.n > 0 {
		if c != ',' {
			o.ok = false
			return nil, false
		}
		s.pos++
	}
	o.n++
	k, _, ok := s.str(build)
	if !ok || s.peek() != ':' {
		o.ok = false
		return nil, false
	}
	s.pos++
	return k, true
}

// Array iterates over an array's elements.
type Array struct {
	s  *Scanner
	n  int
	ok bool
}

// Array starts reading an array.
func (s *Scanner) Array() (Array, bool) {
	if s.peek() != '[' {
		return Array{}, false
	}
	s.pos++
	return Array{s: s, ok: true}, true
}

// Next reports whether another element follows (the caller then reads
// it); false at the closing bracket or on an error (see OK).
func (a *Array) Next() bool {
	s := a.s
	if !a.ok {
		return false
	}
	c := s.peek()
	if c == ']' {
		s.pos++
		return false
	}
	if a.n > 0 {
		if c != ',' {
			a.ok = false
			return false
		}
		s.pos++
	}
	a.n++
	return true
}

// OK reports whether the array was read to its end without error.
func (a *Array) OK() bool { return a.ok }

// Fields reads an object (or null: no fields) whose keys are among known
// (see Object.Keys), calling field with each key's index to read its
// value; field returns false when the value cannot be read.
func (s *Scanner) Fields(field func(k int) bool, known ...string) bool {
	if s.Null() {
		return true
	}
	o, ok := s.Object()
	if !ok {
		return false
	}
	for {
		k := o.Keys(known...)
		if k < 0 {
			return o.OK()
		}
		if !field(k) {
			return false
		}
	}
}

// Elems reads an array, calling elem to read each element; isArray is
// false for null (and elem never called).
func (s *Scanner) Elems(elem func() bool) (isArray, ok bool) {
	if s.Null() {
		return false, true
	}
	a, ok := s.Array()
	if !ok {
		return false, false
	}
	for a.Next() {
		if !elem() {
			return true, false
		}
	}
	return true, a.OK()
}

// Int32s reads an array of int32 as encoding/json would into an []int32
// (null: nil; []: empty, not nil).
func (s *Scanner) Int32s() ([]int32, bool) {
	if s.Null() {
		return nil, true
	}
	a, ok := s.Array()
	if !ok {
		return nil, false
	}
	out := make([]int32, 0, 16)
	for a.Next() {
		n, ok := s.Int(32)
		if !ok {
			return nil, false
		}
		out = append(out, int32(n))
	}
	return out, a.OK()
}

// Int32sText reads an array of integers that fit in int32 written exactly
// as encoding/json writes an []int32 ("[1,-2,3]", "[]": no white space
// inside, no leading zeros, no "-0") and returns its bytes and the number
// of elements, without converting them: text is what AppendInt32s writes
// for the ids json.Unmarshal reads from it. For anything else (null, white
// space inside, another number form, a value out of range) it reports
// false and leaves the scanner where it was, so that the caller can read
// the value another way.
func (s *Scanner) Int32sText() (text []byte, n int, ok bool) {
	p0 := s.pos
	s.ws()
	d, start := s.data, s.pos
	s.pos = p0
	if start >= len(d) || d[start] != '[' {
		return nil, 0, false
	}
	i := start + 1
	if i < len(d) && d[i] == ']' {
		s.pos = i + 1
		return d[start : i+1], 0, true
	}
	for {
		neg := i < len(d) && d[i] == '-'
		if neg {
			i++
		}
		j := i
		if i+8 <= len(d) {
			// The digits among the next 8 bytes, at once.
			i += digitRun(binary.LittleEndian.Uint64(d[i:]))
		}
		if i-j == 8 || i+8 > len(d) {
			for i < len(d) && d[i]-'0' <= 9 {
				i++
			}
		}
		switch digits := i - j; {
		case digits == 0, digits > 10, digits > 1 && d[j] == '0', neg && digits == 1 && d[j] == '0':
			return nil, 0, false
		case digits == 10:
			limit := "2147483647"
			if neg {
				limit = "2147483648"
			}
			if string(d[j:i]) > limit {
				return nil, 0, false
			}
		}
		n++
		if i >= len(d) {
			return nil, 0, false
		}
		switch d[i] {
		case ']':
			s.pos = i + 1
			return d[start : i+1], n, true
		case ',':
			i++
		default:
			return nil, 0, false
		}
	}
}

// digitRun returns how many of the 8 bytes of x (little-endian: the first
// in the low byte) are ASCII digits before the first that is not.
func digitRun(x uint64) int {
	const (
		hi    = 0xF0F0F0F0F0F0F0F0
		zeros = 0x3030303030303030
		six   = 0x0606060606060606
		low7  = 0x7F7F7F7F7F7F7F7F
		top   = 0x8080808080808080
	)
	// A byte is a digit when its high nibble is 3 and adding 6 keeps it
	// (its low nibble is at most 9); what a byte above 0xF9 carries into
	// the next one only lands after a non-digit.
	nz := (x&hi ^ zeros) | ((x+six)&hi ^ zeros)
	// The top bit of each byte that is not zero, i.e. not a digit.
	m := ((nz&low7 + low7) | nz) & top
	return bits.TrailingZeros64(m) / 8
}

// Float32s reads an array of float32 as encoding/json would into a
// []float32 (null: nil; []: empty, not nil).
func (s *Scanner) Float32s() ([]float32, bool) {
	if s.Null() {
		return nil, true
	}
	a, ok := s.Array()
	if !ok {
		return nil, false
	}
	out := make([]float32, 0, 16)
	for a.Next() {
		f, ok := s.Float(32)
		if !ok {
			return nil, false
		}
		out = append(out, float32(f))
	}
	return out, a.OK()
}

// IntBits is the size of Go's int, for Int.
const IntBits = 32 << (^uint(0) >> 63)

// plain marks the ASCII bytes AppendString copies as they are.
var plain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// AppendString appends s as a JSON string exactly as encoding/json's
// Marshal writes it (HTML-safe: <, > and & escaped; U+2028 and U+2029
// escaped; invalid UTF-8 replaced by U+FFFD).
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if plain[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendInt32s appends ids as encoding/json's Marshal writes an []int32
// (nil: null).
func AppendInt32s(b []byte, ids []int32) []byte {
	if ids == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return append(b, ']')
}

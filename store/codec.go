package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/aglrl/agl/internal/fastjson"
)

// The stored form of a "model_request" event (what both backends write in
// the events table's data column since schema version 3). A rollout's
// calls resend their whole history, so storing each event's JSON as is
// grows a rollout's storage with the square of its length. Instead an
// event is stored against a base, an earlier model_request event of the
// same attempt (the latest of the same agent, when the writer knows it):
// its prompt ids as the prefix they share with the base's prompt+response
// ids plus the ids after it, its request as the lengths
// of the prefix and suffix it shares with the base's request plus the
// bytes between; token ids as varints, not decimal JSON; everything else
// (the "skeleton": the JSON with those values cut out) as is; the whole
// zstd-compressed when that is smaller.
//
// Readers get the JSON back byte for byte (DecodeEvent): the encoder only
// cuts out a value it can put back exactly, and checks the reassembly
// before storing it. Any other event, and every row written before schema
// version 3, is stored as its JSON: a stored form starts with the byte
// 0x00, which no JSON text does, so the two tell apart without a column.
//
// A base is named by its sequence number and decoded from the store, so a
// stored event is reconstructible from the store alone, whichever process
// wrote it. An attempt's events are deleted together (Prune deletes whole
// rollouts), so a base outlives every event stored against it.
//
// Layout: 0x00 'E' version flags, uvarint base seq (0: none), then the
// payload (zstd-compressed when flags&1): uvarint len(skeleton), skeleton,
// uvarint number of holes, and per hole in order of position: kind byte,
// uvarint offset in the skeleton (from the previous hole's), and
//
//	holePromptIDs:   uvarint prefix, uvarint n, n uvarint(uint32(id))
//	holeResponseIDs: uvarint n, n uvarint(uint32(id))
//
// where a prompt's prefix is a length in bytes of the base's ids as text
// (CallBase.IDs, ending at an id), so that neither side parses or prints
// the ids a call shares with the one before.
//
//	holeRequest:     uvarint prefix, uvarint suffix, uvarint n, n bytes
const (
	codecMagic0  = 0x00
	codecMagic1  = 'E'
	codecVersion = 1
	flagZstd     = 1

	holePromptIDs   = 1
	holeResponseIDs = 2
	holeRequest     = 3

	// compressMin: payloads shorter than this are stored uncompressed.
	compressMin = 256
)

// CallBase is what a later model_request event may be stored against: one
// stored event's prompt+response ids and request body, decoded.
type CallBase struct {
	Seq int64
	// IDs are the prompt ids then the response ids, as JSON writes them
	// between the brackets ("1,2,3").
	IDs     []byte
	Request []byte
}

func (b *CallBase) size() int64 { return int64(len(b.IDs)+len(b.Request)) + 64 }

// joinIDs returns the text of the ids of two arrays' insides, in order.
func joinIDs(a, b []byte) []byte {
	out := make([]byte, 0, len(a)+1+len(b))
	out = append(out, a...)
	if len(a) > 0 && len(b) > 0 {
		out = append(out, ',')
	}
	return append(out, b...)
}

var (
	// zenc encodes on up to GOMAXPROCS goroutines at once: with one
	// encoder, concurrent calls queued for it (EncodeAll takes an
	// encoder from a pool of that size).
	zenc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(0), zstd.WithLowerEncoderMem(true))
	zdec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(1<<30))
)

// Encoded reports whether stored is an encoded form (not plain JSON).
func Encoded(stored []byte) bool {
	return len(stored) >= 4 && stored[0] == codecMagic0 && stored[1] == codecMagic1
}

// BaseSeq returns the sequence number of the base a stored form was
// encoded against (0: none, or plain JSON).
func BaseSeq(stored []byte) int64 {
	if !Encoded(stored) {
		return 0
	}
	v, n := binary.Uvarint(stored[4:])
	if n <= 0 {
		return 0
	}
	return int64(v)
}

// withBaseSeq returns a copy of the encoded form stored naming base seq
// instead of the one it names.
func withBaseSeq(stored []byte, seq int64) []byte {
	_, n := binary.Uvarint(stored[4:])
	if n <= 0 {
		return stored
	}
	rest := stored[4+n:]
	out := make([]byte, 4, 4+binary.MaxVarintLen64+len(rest))
	copy(out, stored[:4])
	out = binary.AppendUvarint(out, uint64(seq))
	return append(out, rest...)
}

// span is a top-level field's value within an event's JSON.
type span struct {
	kind       byte
	start, end int
}

// topFields finds the values of the top-level fields prompt_ids,
// response_ids, request and agent of a JSON object (keys as written,
// matched without decoding escapes); ok is false when data is not a JSON
// object.
func topFields(data []byte) (holes []span, agent []byte, ok bool) {
	s := fastjson.New(data)
	o, ok := s.Object()
	if !ok {
		return nil, nil, false
	}
	for {
		key, more := o.Next()
		if !more {
			return holes, agent, o.OK() && s.End()
		}
		var v []byte
		ok := false
		if ids := string(key) == "prompt_ids" || string(key) == "response_ids"; ids {
			// Ids as encoding/json writes them, read at once.
			v, _, ok = s.Int32sText()
		}
		if !ok {
			if v, ok = s.Raw(); !ok {
				return nil, nil, false
			}
		}
		end := s.Offset()
		start := end - len(v)
		switch string(key) {
		case "prompt_ids":
			holes = append(holes, span{holePromptIDs, start, end})
		case "response_ids":
			holes = append(holes, span{holeResponseIDs, start, end})
		case "request":
			holes = append(holes, span{holeRequest, start, end})
		case "agent":
			if v[0] == '"' && bytes.IndexByte(v[1:len(v)-1], '\\') < 0 {
				agent = v[1 : len(v)-1]
			}
		}
	}
}

// parseIDs parses a JSON array of int32 written exactly as encoding/json
// writes one ("[1,-2,3]": no white space, no leading zeros, no "-0"); ok
// is false for anything else (white space, null, floats), which then
// stays in the skeleton. What it accepts formats back to the same bytes.
func parseIDs(v []byte) ([]int32, bool) {
	if !validIDs(v) {
		return nil, false
	}
	return fastjson.New(v).Int32s()
}

// validIDs reports whether v is an id array as encoding/json writes one.
func validIDs(v []byte) bool {
	s := fastjson.New(v)
	_, _, ok := s.Int32sText()
	return ok && s.End()
}

// CallLayout locates, in a model_request event's JSON, the values its
// stored form cuts out: byte offsets [start, end) into the data of the
// values (without white space) of the top-level prompt_ids,
// response_ids and request members, a zero span for one that is absent,
// and the agent the event names. The writer that built the JSON knows
// them; the encoder then does not scan the JSON for them. It checks its
// reassembly whatever the layout says, so a wrong layout costs
// compression, never data.
type CallLayout struct {
	PromptIDs, ResponseIDs, Request [2]int
	Agent                           string
}

// holes returns the layout's spans, in order; ok is false when they are
// not spans of values of their kind in data, in order.
func (l *CallLayout) holes(data []byte) (holes []span, ok bool) {
	last := 0
	for _, h := range [...]span{{holePromptIDs, l.PromptIDs[0], l.PromptIDs[1]}, {holeResponseIDs, l.ResponseIDs[0], l.ResponseIDs[1]}, {holeRequest, l.Request[0], l.Request[1]}} {
		if h.start == 0 && h.end == 0 {
			continue
		}
		if h.start < last || h.end-h.start < 2 || h.end > len(data) {
			return nil, false
		}
		open, end := byte('['), byte(']')
		if h.kind == holeRequest {
			open, end = '{', '}'
		}
		if data[h.start] != open || data[h.end-1] != end {
			return nil, false
		}
		holes = append(holes, h)
		last = h.end
	}
	return holes, true
}

// BaseOf returns the CallBase a model_request event's JSON provides (its
// Seq left 0), and the agent it names; ok is false when data is not an
// object. An event with neither ids nor a request (the record of a
// refused call) provides none: b is nil, and the agent's calls keep
// encoding against the call before it.
func BaseOf(data []byte) (b *CallBase, agent string, ok bool) {
	holes, ag, ok := topFields(data)
	if !ok {
		return nil, "", false
	}
	if len(holes) == 0 {
		return nil, string(ag), true
	}
	b, _ = baseFrom(data, holes)
	return b, string(ag), true
}

// baseFrom checks the id arrays among the holes of data and returns the
// CallBase data provides; ok is false when an id array is not as
// encoding/json writes one.
func baseFrom(data []byte, holes []span) (b *CallBase, ok bool) {
	b = &CallBase{}
	var prompt, resp []byte
	for _, h := range holes {
		v := data[h.start:h.end]
		switch h.kind {
		case holePromptIDs, holeResponseIDs:
			if !validIDs(v) {
				return b, false
			}
			if h.kind == holePromptIDs {
				prompt = v[1 : len(v)-1]
			} else {
				resp = v[1 : len(v)-1]
			}
		case holeRequest:
			b.Request = v
		}
	}
	b.IDs = joinIDs(prompt, resp)
	return b, true
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for _, step := range [...]int{4096, 64} {
		for i+step <= n && bytes.Equal(a[i:i+step], b[i:i+step]) {
			i += step
		}
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// commonSuffix is the length of the longest common suffix of a and b, at
// most max.
func commonSuffix(a, b []byte, max int) int {
	n := min(len(a), len(b), max)
	la, lb := len(a), len(b)
	i := 0
	for _, step := range [...]int{4096, 64} {
		for i+step <= n && bytes.Equal(a[la-i-step:la-i], b[lb-i-step:lb-i]) {
			i += step
		}
	}
	for i < n && a[la-1-i] == b[lb-1-i] {
		i++
	}
	return i
}

var bufPool = sync.Pool{New: func() any { return new([]byte) }}

// idsPrefix is the length of the longest prefix of the ids text a that
// is also one of b and ends at an id in both (before a ',' or the end).
func idsPrefix(a, b []byte) int {
	n := commonPrefix(a, b)
	at := func(s []byte, i int) bool { return i == len(s) || s[i] == ',' }
	if n > 0 && at(a, n) && at(b, n) {
		return n
	}
	n = bytes.LastIndexByte(a[:n], ',')
	if n < 0 {
		return 0
	}
	return n
}

// EncodeEvent returns the stored form of a model_request event's JSON,
// encoded against base (nil: none), and the CallBase the event provides
// to later ones (its Seq to be set once stored) with the agent it names.
// Data that the encoding cannot reproduce exactly is returned as is
// (still with its CallBase when it is an object).
func EncodeEvent(data []byte, base *CallBase) (stored []byte, self *CallBase, agent string) {
	holes, ag, ok := topFields(data)
	if !ok {
		return data, nil, ""
	}
	stored, self = encodeScanned(data, holes, base)
	return stored, self, string(ag)
}

func encodeScanned(data []byte, holes []span, base *CallBase) (stored []byte, self *CallBase) {
	var baseSeq int64
	var baseIDs, baseReq []byte
	if base != nil {
		baseSeq, baseIDs, baseReq = base.Seq, base.IDs, base.Request
	}
	bp, idsBuf := bufPool.Get().(*[]byte), bufPool.Get().(*[]byte)
	defer func() { bufPool.Put(bp); bufPool.Put(idsBuf) }()
	p := (*bp)[:0]
	var promptText, respText []byte
	// skeleton
	skelLen := len(data)
	for _, h := range holes {
		skelLen -= h.end - h.start
	}
	p = binary.AppendUvarint(p, uint64(skelLen))
	last := 0
	for _, h := range holes {
		p = append(p, data[last:h.start]...)
		last = h.end
	}
	p = append(p, data[last:]...)
	p = binary.AppendUvarint(p, uint64(len(holes)))
	prev := 0
	off := 0 // offset of the current hole in the skeleton
	last = 0
	for _, h := range holes {
		off += h.start - last
		last = h.end
		v := data[h.start:h.end]
		p = append(p, h.kind)
		p = binary.AppendUvarint(p, uint64(off-prev))
		prev = off
		switch h.kind {
		case holePromptIDs, holeResponseIDs:
			if len(v) < 2 || v[0] != '[' || v[len(v)-1] != ']' {
				return data, nil
			}
			inner := v[1 : len(v)-1]
			if h.kind == holePromptIDs {
				pre := idsPrefix(inner, baseIDs)
				p = binary.AppendUvarint(p, uint64(pre))
				inner = inner[pre:]
				if len(inner) > 0 && inner[0] == ',' {
					inner = inner[1:]
				}
				promptText = v[1 : len(v)-1]
			} else {
				respText = inner
			}
			// Only the ids past the prefix are parsed (and checked).
			*idsBuf = append(append(append((*idsBuf)[:0], '['), inner...), ']')
			ids, ok := parseIDs(*idsBuf)
			if !ok {
				return data, nil
			}
			p = binary.AppendUvarint(p, uint64(len(ids)))
			for _, id := range ids {
				p = binary.AppendUvarint(p, uint64(uint32(id)))
			}
		case holeRequest:
			pre := commonPrefix(v, baseReq)
			suf := commonSuffix(v[pre:], baseReq[pre:], len(v)-pre)
			mid := v[pre : len(v)-suf]
			p = binary.AppendUvarint(p, uint64(pre))
			p = binary.AppendUvarint(p, uint64(suf))
			p = binary.AppendUvarint(p, uint64(len(mid)))
			p = append(p, mid...)
		}
	}
	*bp = p
	out := make([]byte, 4, 4+binary.MaxVarintLen64+len(p)/2)
	out[0], out[1], out[2] = codecMagic0, codecMagic1, codecVersion
	out = binary.AppendUvarint(out, uint64(baseSeq))
	hdr := len(out)
	if len(p) >= compressMin {
		out = zenc.EncodeAll(p, out)
		if len(out)-hdr < len(p) {
			out[3] = flagZstd
		} else {
			out = append(out[:hdr], p...)
		}
	} else {
		out = append(out, p...)
	}
	if len(holes) > 0 { // else no base (see BaseOf)
		self = &CallBase{IDs: joinIDs(promptText, respText)}
		for _, h := range holes {
			if h.kind == holeRequest {
				self.Request = data[h.start:h.end]
			}
		}
	}
	// Check the reassembly (against data, in place): what cannot come
	// back exactly is stored as is.
	if _, _, err := walkPayload(p, base, false, data); err != nil {
		return data, self
	}
	return out, self
}

// ErrBaseMissing is returned by DecodeEvent when the base a stored form
// needs was not given.
var ErrBaseMissing = errors.New("store: event base missing")

// DecodeEvent returns the JSON of a stored form (plain JSON is returned as
// is); base is the CallBase of BaseSeq(stored), nil when that is 0.
func DecodeEvent(stored []byte, base *CallBase) ([]byte, error) {
	out, _, err := decodeEvent(stored, base, false)
	return out, err
}

// decodeEvent is DecodeEvent, also returning the event's own CallBase
// when wantSelf (Seq left 0).
func decodeEvent(stored []byte, base *CallBase, wantSelf bool) ([]byte, *CallBase, error) {
	if !Encoded(stored) {
		if !wantSelf {
			return stored, nil, nil
		}
		b, _, _ := BaseOf(stored)
		return stored, b, nil
	}
	if stored[2] != codecVersion {
		return nil, nil, fmt.Errorf("store: stored event of encoding version %d, this build reads %d", stored[2], codecVersion)
	}
	seq, n := binary.Uvarint(stored[4:])
	if n <= 0 {
		return nil, nil, errors.New("store: stored event: bad header")
	}
	if seq != 0 && (base == nil || base.Seq != int64(seq)) {
		return nil, nil, fmt.Errorf("%w: seq %d", ErrBaseMissing, seq)
	}
	if seq == 0 {
		base = nil
	}
	p := stored[4+n:]
	if stored[3]&flagZstd != 0 {
		var err error
		if p, err = zdec.DecodeAll(p, nil); err != nil {
			return nil, nil, fmt.Errorf("store: stored event: decompress: %w", err)
		}
	}
	return decodePayload(p, base, wantSelf)
}

var errCorrupt = errors.New("store: stored event is corrupt")

// decodePayload reassembles an event's JSON from its payload, and builds
// its CallBase when wantSelf.
func decodePayload(p []byte, base *CallBase, wantSelf bool) ([]byte, *CallBase, error) {
	return walkPayload(p, base, wantSelf, nil)
}

// jsonSink receives an event's JSON piece by piece: it appends the pieces
// to out or, checking, compares them with check (the JSON expected), so
// that the encoder checks its reassembly without building it.
type jsonSink struct {
	out     []byte
	check   []byte
	pos     int // checking: the length compared so far
	bad     bool
	scratch [16]byte
}

func (s *jsonSink) checking() bool { return s.check != nil }

// len is the length of the JSON so far.
func (s *jsonSink) len() int {
	if s.checking() {
		return s.pos
	}
	return len(s.out)
}

func (s *jsonSink) put(b []byte) {
	if !s.checking() {
		s.out = append(s.out, b...)
		return
	}
	if s.bad || len(s.check)-s.pos < len(b) || !bytes.Equal(s.check[s.pos:s.pos+len(b)], b) {
		s.bad = true
		return
	}
	s.pos += len(b)
}

func (s *jsonSink) putByte(c byte) {
	if !s.checking() {
		s.out = append(s.out, c)
		return
	}
	if s.bad || s.pos >= len(s.check) || s.check[s.pos] != c {
		s.bad = true
		return
	}
	s.pos++
}

func (s *jsonSink) putInt(v int64) {
	if !s.checking() {
		s.out = strconv.AppendInt(s.out, v, 10)
		return
	}
	s.put(strconv.AppendInt(s.scratch[:0], v, 10))
}

// walkPayload is decodePayload; with check set, it compares the JSON with
// check instead of building it, and returns errCorrupt when they differ
// (and no JSON or CallBase).
func walkPayload(p []byte, base *CallBase, wantSelf bool, check []byte) ([]byte, *CallBase, error) {
	var baseIDs, baseReq []byte
	if base != nil {
		baseIDs, baseReq = base.IDs, base.Request
	}
	r := reader{p: p}
	sl := r.uvarint()
	if r.err || sl > uint64(len(r.p)) {
		return nil, nil, errCorrupt
	}
	skel := r.p[:sl]
	r.p = r.p[sl:]
	nh := r.uvarint()
	out := jsonSink{check: check}
	if check == nil {
		out.out = make([]byte, 0, len(skel)+len(baseReq)+len(baseIDs)+len(r.p)*3)
	}
	at := 0
	reqStart, reqEnd := -1, -1
	var prompt, resp [2]int // spans of the ids' text in out
	for h := uint64(0); h < nh && !r.err; h++ {
		if len(r.p) == 0 {
			return nil, nil, errCorrupt
		}
		kind := r.p[0]
		r.p = r.p[1:]
		d := r.uvarint()
		if d > uint64(len(skel)-at) {
			return nil, nil, errCorrupt
		}
		out.put(skel[at : at+int(d)])
		at += int(d)
		switch kind {
		case holePromptIDs, holeResponseIDs:
			var pre uint64
			if kind == holePromptIDs {
				pre = r.uvarint()
				if pre > uint64(len(baseIDs)) {
					return nil, nil, errCorrupt
				}
			}
			n := r.uvarint()
			if r.err || n > uint64(len(r.p)) {
				return nil, nil, errCorrupt
			}
			out.putByte('[')
			start := out.len()
			out.put(baseIDs[:pre])
			first := pre == 0
			for i := uint64(0); i < n; i++ {
				v := r.uvarint()
				if !first {
					out.putByte(',')
				}
				first = false
				out.putInt(int64(int32(uint32(v))))
			}
			if kind == holePromptIDs {
				prompt = [2]int{start, out.len()}
			} else {
				resp = [2]int{start, out.len()}
			}
			out.putByte(']')
		case holeRequest:
			pre, suf, n := r.uvarint(), r.uvarint(), r.uvarint()
			if r.err || pre+suf > uint64(len(baseReq)) || n > uint64(len(r.p)) {
				return nil, nil, errCorrupt
			}
			reqStart = out.len()
			out.put(baseReq[:pre])
			out.put(r.p[:n])
			r.p = r.p[n:]
			out.put(baseReq[len(baseReq)-int(suf):])
			reqEnd = out.len()
		default:
			return nil, nil, errCorrupt
		}
		if out.bad {
			return nil, nil, errCorrupt
		}
	}
	if r.err || len(r.p) != 0 {
		return nil, nil, errCorrupt
	}
	out.put(skel[at:])
	if out.checking() {
		if out.bad || out.pos != len(check) {
			return nil, nil, errCorrupt
		}
		return nil, nil, nil
	}
	js := out.out
	var self *CallBase
	if wantSelf && nh > 0 { // else no base (see BaseOf)
		self = &CallBase{IDs: joinIDs(js[prompt[0]:prompt[1]], js[resp[0]:resp[1]])}
		if reqStart >= 0 {
			self.Request = js[reqStart:reqEnd:reqEnd]
		}
	}
	return js, self, nil
}

type reader struct {
	p   []byte
	err bool
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.p)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.p = r.p[n:]
	return v
}

package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// The stored form of a "model_request" event (what both backends write in
// the events table's data column since schema version 3). A rollout's
// calls resend their whole history, so storing each event's JSON as is
// grows a rollout's storage with the square of its length. Instead an
// event is stored against a base, an earlier model_request event of the
// same attempt (the latest of the same agent, when the writer knows it):
// its prompt ids as the length of the prefix they share with the base's
// prompt+response ids plus the ids after it, its request as the lengths
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
	Seq     int64
	IDs     []int32 // prompt ids then response ids
	Request []byte
}

func (b *CallBase) size() int64 { return int64(4*len(b.IDs)+len(b.Request)) + 64 }

var (
	zenc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
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

// span is a top-level field's value within an event's JSON.
type span struct {
	kind       byte
	start, end int
}

// topFields finds the values of the top-level fields prompt_ids,
// response_ids, request and agent of a JSON object; ok is false when data
// is not a JSON object this scanner follows.
func topFields(data []byte) (holes []span, agent []byte, ok bool) {
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil, nil, false
	}
	i = skipWS(data, i+1)
	if i < len(data) && data[i] == '}' {
		return nil, nil, skipWS(data, i+1) == len(data)
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return nil, nil, false
		}
		ks := i
		i = skipString(data, i)
		if i < 0 {
			return nil, nil, false
		}
		key := data[ks+1 : i-1]
		i = skipWS(data, i)
		if i >= len(data) || data[i] != ':' {
			return nil, nil, false
		}
		i = skipWS(data, i+1)
		vs := i
		i = skipValue(data, i, 0)
		if i < 0 {
			return nil, nil, false
		}
		switch string(key) {
		case "prompt_ids":
			holes = append(holes, span{holePromptIDs, vs, i})
		case "response_ids":
			holes = append(holes, span{holeResponseIDs, vs, i})
		case "request":
			holes = append(holes, span{holeRequest, vs, i})
		case "agent":
			if data[vs] == '"' && bytes.IndexByte(data[vs+1:i-1], '\\') < 0 {
				agent = data[vs+1 : i-1]
			}
		}
		i = skipWS(data, i)
		if i >= len(data) {
			return nil, nil, false
		}
		if data[i] == '}' {
			return holes, agent, skipWS(data, i+1) == len(data)
		}
		if data[i] != ',' {
			return nil, nil, false
		}
		i = skipWS(data, i+1)
	}
}

func skipWS(d []byte, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at d[i] ('"').
func skipString(d []byte, i int) int {
	for j := i + 1; j < len(d); j++ {
		switch d[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// skipValue returns the index after the JSON value starting at d[i], -1
// when there is none (data is valid JSON, so this only follows brackets
// and strings).
func skipValue(d []byte, i, depth int) int {
	if i >= len(d) || depth > 10000 {
		return -1
	}
	switch d[i] {
	case '"':
		return skipString(d, i)
	case '{', '[':
		level := 0
		for j := i; j < len(d); j++ {
			switch d[j] {
			case '"':
				j = skipString(d, j)
				if j < 0 {
					return -1
				}
				j--
			case '{', '[':
				level++
			case '}', ']':
				level--
				if level == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(d) && d[j] != ',' && d[j] != '}' && d[j] != ']' && d[j] != ' ' && d[j] != '\t' && d[j] != '\n' && d[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// parseIDs parses a JSON array of int32 written exactly as
// encoding/json writes one ("[1,-2,3]": no whitespace, no leading zeros,
// no "-0"); ok is false for anything else (whitespace, null, floats),
// which then stays in the skeleton. What it accepts formats back to the
// same bytes.
func parseIDs(v []byte, ids []int32) ([]int32, bool) {
	if len(v) < 2 || v[0] != '[' || v[len(v)-1] != ']' {
		return nil, false
	}
	if len(v) == 2 {
		return ids, true
	}
	i, end := 1, len(v)-1
	for {
		neg := false
		if v[i] == '-' {
			neg = true
			i++
		}
		start := i
		var n int64
		for i < end && v[i] >= '0' && v[i] <= '9' {
			n = n*10 + int64(v[i]-'0')
			i++
			if n > 1<<31 {
				return nil, false
			}
		}
		digits := i - start
		switch {
		case digits == 0, digits > 1 && v[start] == '0', neg && n == 0:
			return nil, false
		case neg:
			n = -n
		}
		if n > 1<<31-1 || n < -1<<31 {
			return nil, false
		}
		ids = append(ids, int32(n))
		if i == end {
			return ids, true
		}
		if v[i] != ',' {
			return nil, false
		}
		i++
		if i == end {
			return nil, false
		}
	}
}

// BaseOf returns the CallBase a model_request event's JSON provides (its
// Seq left 0), and the agent it names; ok is false when data is not an
// object.
func BaseOf(data []byte) (b *CallBase, agent string, ok bool) {
	holes, ag, ok := topFields(data)
	if !ok {
		return nil, "", false
	}
	b, _, _ = baseFrom(data, holes)
	return b, string(ag), true
}

// baseFrom parses the holes of data; nPrompt is how many of b.IDs are
// prompt ids, ok whether every id array parsed.
func baseFrom(data []byte, holes []span) (b *CallBase, nPrompt int, ok bool) {
	b = &CallBase{}
	var resp []int32
	ok = true
	for _, h := range holes {
		v := data[h.start:h.end]
		switch h.kind {
		case holePromptIDs:
			ids, good := parseIDs(v, make([]int32, 0, len(v)/5))
			b.IDs, ok = ids, ok && good
		case holeResponseIDs:
			ids, good := parseIDs(v, nil)
			resp, ok = ids, ok && good
		case holeRequest:
			b.Request = v
		}
	}
	nPrompt = len(b.IDs)
	b.IDs = append(b.IDs, resp...)
	return b, nPrompt, ok
}

func commonPrefix[T comparable](a, b []T) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

func commonSuffix(a, b []byte, max int) int {
	n := min(len(a), len(b), max)
	i := 0
	for i < n && a[len(a)-1-i] == b[len(b)-1-i] {
		i++
	}
	return i
}

var bufPool = sync.Pool{New: func() any { return new([]byte) }}

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
	self, nPrompt, idsOK := baseFrom(data, holes)
	if !idsOK {
		return data, self
	}
	var baseSeq int64
	var baseIDs []int32
	var baseReq []byte
	if base != nil {
		baseSeq, baseIDs, baseReq = base.Seq, base.IDs, base.Request
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	p := (*bp)[:0]
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
			ids := self.IDs[nPrompt:]
			if h.kind == holePromptIDs {
				ids = self.IDs[:nPrompt]
				pre := commonPrefix(ids, baseIDs)
				p = binary.AppendUvarint(p, uint64(pre))
				ids = ids[pre:]
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
	// Check the reassembly: what cannot come back exactly is stored as is.
	got, _, err := decodePayload(p, base, false)
	if err != nil || !bytes.Equal(got, data) {
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
	var baseIDs []int32
	var baseReq []byte
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
	out := make([]byte, 0, len(skel)+len(baseReq)+8*len(baseIDs)+len(r.p)*2)
	at := 0
	var self *CallBase
	var resp []int32
	if wantSelf {
		self = &CallBase{}
	}
	reqStart, reqEnd := -1, -1
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
		out = append(out, skel[at:at+int(d)]...)
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
			out = append(out, '[')
			first := true
			var ids *[]int32
			if wantSelf {
				if kind == holePromptIDs {
					self.IDs = append(make([]int32, 0, int(pre+n)), baseIDs[:pre]...)
					ids = &self.IDs
				} else {
					resp = make([]int32, 0, n)
					ids = &resp
				}
			}
			for _, id := range baseIDs[:pre] {
				if !first {
					out = append(out, ',')
				}
				first = false
				out = strconv.AppendInt(out, int64(id), 10)
			}
			for i := uint64(0); i < n; i++ {
				v := r.uvarint()
				if !first {
					out = append(out, ',')
				}
				first = false
				out = strconv.AppendInt(out, int64(int32(uint32(v))), 10)
				if ids != nil {
					*ids = append(*ids, int32(uint32(v)))
				}
			}
			out = append(out, ']')
		case holeRequest:
			pre, suf, n := r.uvarint(), r.uvarint(), r.uvarint()
			if r.err || pre+suf > uint64(len(baseReq)) || n > uint64(len(r.p)) {
				return nil, nil, errCorrupt
			}
			reqStart = len(out)
			out = append(out, baseReq[:pre]...)
			out = append(out, r.p[:n]...)
			r.p = r.p[n:]
			out = append(out, baseReq[len(baseReq)-int(suf):]...)
			reqEnd = len(out)
		default:
			return nil, nil, errCorrupt
		}
	}
	if r.err || len(r.p) != 0 {
		return nil, nil, errCorrupt
	}
	out = append(out, skel[at:]...)
	if wantSelf {
		self.IDs = append(self.IDs, resp...)
		if reqStart >= 0 {
			self.Request = out[reqStart:reqEnd:reqEnd]
		}
	}
	return out, self, nil
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

package tinker

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// The protobuf messages of the Tinker SDK's tinker_public.proto (schema
// decoded from the serialized descriptor the SDK 0.25.0 ships in
// tinker/proto/tinker_public_pb2.py; testdata has it). The SDK uses them
// for the forward_backward request body and for the forward_backward and
// sample results of retrieve_future; every other body is JSON. proto3:
// scalars at their zero value are not written.

// DType is tinker_public.DType.
type DType int32

// The DType values.
const (
	DTypeUnspecified DType = 0
	DTypeFloat32     DType = 1
	DTypeInt64       DType = 2
	DTypeInt32       DType = 3
	DTypeBFloat16    DType = 4
)

func (d DType) size() int {
	switch d {
	case DTypeFloat32, DTypeInt32:
		return 4
	case DTypeInt64:
		return 8
	case DTypeBFloat16:
		return 2
	}
	return 0
}

// Tensor is tinker_public.Tensor with the dense encoding (the only one
// agl sends; a sparse_csr tensor is refused when decoded).
type Tensor struct {
	DType DType
	Shape []int64
	Dense []byte
}

// Float32Tensor is a 1-D float32 tensor of v.
func Float32Tensor(v []float32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return Tensor{DType: DTypeFloat32, Shape: []int64{int64(len(v))}, Dense: b}
}

// Int64Tensor is a 1-D int64 tensor of v.
func Int64Tensor(v []int32) Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(x)))
	}
	return Tensor{DType: DTypeInt64, Shape: []int64{int64(len(v))}, Dense: b}
}

// Values decodes a dense tensor of any dtype as float64s, checking that
// its byte length and shape agree.
func (t Tensor) Values() ([]float64, error) {
	v, err := decodeValues(t.Dense, t.DType)
	if err != nil {
		return nil, err
	}
	n := int64(1)
	for _, s := range t.Shape {
		if s < 0 {
			return nil, fmt.Errorf("negative dimension %d in shape %v", s, t.Shape)
		}
		n *= s
	}
	if len(t.Shape) > 0 && n != int64(len(v)) {
		return nil, fmt.Errorf("shape %v holds %d values, data %d", t.Shape, n, len(v))
	}
	return v, nil
}

func decodeValues(b []byte, d DType) ([]float64, error) {
	sz := d.size()
	if sz == 0 {
		return nil, fmt.Errorf("unknown dtype %d", d)
	}
	if len(b)%sz != 0 {
		return nil, fmt.Errorf("%d bytes are not a whole number of %d-byte values", len(b), sz)
	}
	v := make([]float64, len(b)/sz)
	for i := range v {
		switch d {
		case DTypeFloat32:
			v[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		case DTypeInt32:
			v[i] = float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
		case DTypeInt64:
			v[i] = float64(int64(binary.LittleEndian.Uint64(b[8*i:])))
		case DTypeBFloat16:
			v[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16))
		}
	}
	return v, nil
}

// Datum is tinker_public.Datum with one encoded_text chunk.
type Datum struct {
	Tokens []int32
	Inputs map[string]Tensor
}

// ForwardBackwardRequest is tinker_public.ForwardBackwardRequest.
type ForwardBackwardRequest struct {
	ModelID      string
	SeqID        int32
	Data         []Datum
	LossFn       string
	LossFnConfig map[string]float64
	ForwardOnly  bool
}

func appendInt32s(b []byte, v []int32) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return b
}

func appendMsg(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendPackedInt64s(b []byte, num protowire.Number, v []int64) []byte {
	if len(v) == 0 {
		return b
	}
	var p []byte
	for _, x := range v {
		p = protowire.AppendVarint(p, uint64(x))
	}
	return appendMsg(b, num, p)
}

// appendDoubleMap writes a map<string, double> field, keys sorted.
func appendDoubleMap(b []byte, num protowire.Number, m map[string]float64) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, k)
		e = protowire.AppendTag(e, 2, protowire.Fixed64Type)
		e = protowire.AppendFixed64(e, math.Float64bits(m[k]))
		b = appendMsg(b, num, e)
	}
	return b
}

func (t Tensor) marshal() []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType) // dense (oneof: written even when empty)
	b = protowire.AppendBytes(b, t.Dense)
	b = appendVarint(b, 3, uint64(t.DType))
	return appendPackedInt64s(b, 4, t.Shape)
}

func (d Datum) marshal() []byte {
	var chunk, text []byte
	text = appendMsg(text, 1, appendInt32s(nil, d.Tokens))
	chunk = appendMsg(chunk, 1, text)
	var b []byte
	b = appendMsg(b, 1, chunk)
	keys := make([]string, 0, len(d.Inputs))
	for k := range d.Inputs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, k)
		e = appendMsg(e, 2, d.Inputs[k].marshal())
		b = appendMsg(b, 2, e)
	}
	return b
}

// Marshal encodes r as the SDK does (forward_backward_request_to_proto).
func (r ForwardBackwardRequest) Marshal() []byte {
	var b []byte
	b = appendString(b, 1, r.ModelID)
	b = appendVarint(b, 2, uint64(int64(r.SeqID)))
	for _, d := range r.Data {
		b = appendMsg(b, 3, d.marshal())
	}
	b = appendString(b, 4, r.LossFn)
	b = appendDoubleMap(b, 5, r.LossFnConfig)
	if r.ForwardOnly {
		b = appendVarint(b, 6, 1)
	}
	return b
}

// fields walks the fields of one message, calling f with each field's
// number, wire type and value bytes (for varints: the varint's bytes).
// strict refuses a field f does not know (f returns false).
func fields(b []byte, msg string, strict bool, f func(num protowire.Number, typ protowire.Type, v []byte) (bool, error)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%s: %w", msg, protowire.ParseError(n))
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return fmt.Errorf("%s field %d: %w", msg, num, protowire.ParseError(m))
		}
		v := b[:m]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(b)
		}
		b = b[m:]
		known, err := f(num, typ, v)
		if err != nil {
			return fmt.Errorf("%s field %d: %w", msg, num, err)
		}
		if !known && strict {
			return fmt.Errorf("%s: unknown field %d (wire type %d)", msg, num, typ)
		}
	}
	return nil
}

func want(typ, w protowire.Type) error {
	if typ != w {
		return fmt.Errorf("wire type %d, want %d", typ, w)
	}
	return nil
}

func varint(typ protowire.Type, v []byte) (uint64, error) {
	if err := want(typ, protowire.VarintType); err != nil {
		return 0, err
	}
	x, _ := protowire.ConsumeVarint(v)
	return x, nil
}

func double(typ protowire.Type, v []byte) (float64, error) {
	if err := want(typ, protowire.Fixed64Type); err != nil {
		return 0, err
	}
	x, _ := protowire.ConsumeFixed64(v)
	return math.Float64frombits(x), nil
}

// int64s reads a repeated int64 field, packed or not.
func int64s(dst []int64, typ protowire.Type, v []byte) ([]int64, error) {
	if typ == protowire.VarintType {
		x, _ := protowire.ConsumeVarint(v)
		return append(dst, int64(x)), nil
	}
	if err := want(typ, protowire.BytesType); err != nil {
		return nil, err
	}
	for len(v) > 0 {
		x, n := protowire.ConsumeVarint(v)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		dst, v = append(dst, int64(x)), v[n:]
	}
	return dst, nil
}

// mapEntry reads a map entry's key (string) and value bytes.
func mapEntry(v []byte, msg string, strict bool, valType protowire.Type) (key string, val []byte, err error) {
	err = fields(v, msg, strict, func(num protowire.Number, typ protowire.Type, x []byte) (bool, error) {
		switch num {
		case 1:
			key = string(x)
			return true, want(typ, protowire.BytesType)
		case 2:
			val = x
			return true, want(typ, valType)
		}
		return false, nil
	})
	return key, val, err
}

func doubleEntry(v []byte, msg string, strict bool) (string, float64, error) {
	k, x, err := mapEntry(v, msg, strict, protowire.Fixed64Type)
	if err != nil || x == nil {
		return k, 0, err
	}
	f, _ := double(protowire.Fixed64Type, x)
	return k, f, nil
}

func unmarshalTensor(b []byte) (Tensor, error) {
	var t Tensor
	dense := false
	err := fields(b, "Tensor", true, func(num protowire.Number, typ protowire.Type, v []byte) (bool, error) {
		var err error
		switch num {
		case 1:
			t.Dense, dense = v, true
			return true, want(typ, protowire.BytesType)
		case 2:
			return true, fmt.Errorf("sparse_csr tensors are not accepted")
		case 3:
			var d uint64
			d, err = varint(typ, v)
			t.DType = DType(d)
		case 4:
			t.Shape, err = int64s(t.Shape, typ, v)
		default:
			return false, nil
		}
		return true, err
	})
	if err == nil && !dense {
		err = fmt.Errorf("Tensor: no dense data")
	}
	return t, err
}

func unmarshalDatum(b []byte) (Datum, error) {
	d := Datum{Inputs: map[string]Tensor{}}
	err := fields(b, "Datum", true, func(num protowire.Number, typ protowire.Type, v []byte) (bool, error) {
		switch num {
		case 1:
			if err := want(typ, protowire.BytesType); err != nil {
				return true, err
			}
			return true, fields(v, "Chunk", true, func(num protowire.Number, typ protowire.Type, v []byte) (bool, error) {
				if num != 1 {
					return false, fmt.Errorf("only encoded_text chunks are accepted, got field %d", num)
				}
				return true, fields(v, "EncodedTextChunk", true, func(num protowire.Number, typ protowire.Type, v []byte) (bool, error) {
					if num != 1 {
						return false, nil
					}
					if err := want(typ, protowire.BytesType); err != nil {
						return true, err
					}
					if len(v)%4 != 0 {
						return true, fmt.Errorf("tokens: %d bytes are not whole int32s", len(v))
					}
					for i := 0; i < len(v); i += 4 {
						d.Tokens = append(d.Tokens, int32(binary.LittleEndian.Uint32(v[i:])))
					}
					return true, nil
				})
			})
		case 2:
			if err := want(typ, protowire.BytesType); err != nil {
				return true, err
			}
			k, tv, err := mapEntry(v, "LossFnInputsEntry", true, protowire.BytesType)
			if err != nil {
				return true, err
			}
			t, err := unmarshalTensor(tv)
			if err != nil {
				return true, fmt.Errorf("loss_fn_inputs[%q]: %w", k, err)
			}
			d.Inputs[k] = t
			return true, nil
		}
		return false, nil
	})
	return d, err
}

// UnmarshalForwardBackwardRequest decodes a forward_backward body strictly:
// an unknown field, a wrong wire type or a non-text chunk is an error.
func UnmarshalForwardBackwardRequest(b []byte) (ForwardBackwardRequest, error) {
	var r ForwardBackwardRequest
	err := fields(b, "ForwardBackwardRequest", true, func(num protowire.Number, typ protowire.Type, v []byte) (bool, error) {
		var err error
		switch num {
		case 1:
			r.ModelID, err = string(v), want(typ, protowire.BytesType)
		case 2:
			var x uint64
			x, err = varint(typ, v)
			r.SeqID = int32(x)
		case 3:
			if err = want(typ, protowire.BytesType); err == nil {
				var d Datum
				d, err = unmarshalDatum(v)
				r.Data = append(r.Data, d)
			}
		case 4:
			r.LossFn, err = string(v), want(typ, protowire.BytesType)
		case 5:
			if err = want(typ, protowire.BytesType); err == nil {
				var k string
				var x float64
				k, x, err = doubleEntry(v, "LossFnConfigEntry", true)
				if r.LossFnConfig == nil {
					r.LossFnConfig = map[string]float64{}
				}
				r.LossFnConfig[k] = x
			}
		case 6:
			var x uint64
			x, err = varint(typ, v)
			r.ForwardOnly = x != 0
		default:
			return false, nil
		}
		return true, err
	})
	return r, err
}

// ForwardBackwardOutput is tinker_public.ForwardBackwardOutput decoded per
// datum: Outputs[i][field] holds datum i's values of field (float32,
// bfloat16, int32 and int64 all widened to float64, as the SDK widens
// them).
type ForwardBackwardOutput struct {
	LossFnOutputType string
	Outputs          []map[string][]float64
	Metrics          map[string]float64
}

// Marshal encodes o as one ArrayRecord of float32 fields (what a server
// sends for the built-in losses).
func (o ForwardBackwardOutput) Marshal() []byte {
	var b []byte
	b = appendString(b, 1, o.LossFnOutputType)
	if len(o.Outputs) > 0 {
		var rec []byte
		rec = appendString(rec, 1, o.LossFnOutputType)
		names := []string{}
		for k := range o.Outputs[0] {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			var data, offs []byte
			offs = binary.LittleEndian.AppendUint64(offs, 0)
			for _, out := range o.Outputs {
				for _, x := range out[k] {
					data = binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(x)))
				}
				offs = binary.LittleEndian.AppendUint64(offs, uint64(len(data)))
			}
			var bt []byte
			bt = appendMsg(bt, 1, data)
			bt = appendMsg(bt, 2, offs)
			bt = appendVarint(bt, 3, uint64(DTypeFloat32))
			var e []byte
			e = protowire.AppendTag(e, 1, protowire.BytesType)
			e = protowire.AppendString(e, k)
			e = appendMsg(e, 2, bt)
			rec = appendMsg(rec, 2, e)
		}
		rec = appendVarint(rec, 3, uint64(len(o.Outputs)))
		b = appendMsg(b, 2, rec)
	}
	return appendDoubleMap(b, 3, o.Metrics)
}

type batchedTensor struct {
	data, offsets []byte
	dtype         DType
	trailing      []int64
}

// perDatum slices a BatchedTensor into its datums' values.
func (bt batchedTensor) perDatum() ([][]float64, error) {
	sz := bt.dtype.size()
	if sz == 0 {
		return nil, fmt.Errorf("unknown dtype %d", bt.dtype)
	}
	if len(bt.offsets)%8 != 0 {
		return nil, fmt.Errorf("offsets: %d bytes are not whole int64s", len(bt.offsets))
	}
	vals, err := decodeValues(bt.data, bt.dtype)
	if err != nil {
		return nil, err
	}
	var out [][]float64
	prev := int64(-1)
	for i := 0; i+8 <= len(bt.offsets); i += 8 {
		o := int64(binary.LittleEndian.Uint64(bt.offsets[i:]))
		if o < 0 || o > int64(len(bt.data)) || o%int64(sz) != 0 || (prev >= 0 && o < prev) {
			return nil, fmt.Errorf("offset %d out of order or outside %d data bytes", o, len(bt.data))
		}
		if prev >= 0 {
			out = append(out, vals[prev/int64(sz):o/int64(sz)])
		}
		prev = o
	}
	return out, nil
}

// UnmarshalForwardBackwardOutput decodes a forward_backward result.
// Unknown fields are skipped (forward compatibility); inconsistent
// offsets, dtypes or datum counts are errors.
func UnmarshalForwardBackwardOutput(b []byte) (ForwardBackwardOutput, error) {
	o := ForwardBackwardOutput{Metrics: map[string]float64{}}
	err := fields(b, "ForwardBackwardOutput", false, func(num protowire.Number, typ protowire.Type, v []byte) (bool, error) {
		switch num {
		case 1:
			o.LossFnOutputType = string(v)
			return true, want(typ, protowire.BytesType)
		case 2:
			if err := want(typ, protowire.BytesType); err != nil {
				return true, err
			}
			per := map[string][][]float64{}
			var numDatums int64
			err := fields(v, "ArrayRecord", false, func(num protowire.Number, typ protowire.Type, v []byte) (bool, error) {
				switch num {
				case 2:
					if err := want(typ, protowire.BytesType); err != nil {
						return true, err
					}
					k, btv, err := mapEntry(v, "FieldsEntry", false, protowire.BytesType)
					if err != nil {
						return true, err
					}
					var bt batchedTensor
					err = fields(btv, "BatchedTensor", false, func(num protowire.Number, typ protowire.Type, v []byte) (bool, error) {
						var err error
						switch num {
						case 1:
							bt.data, err = v, want(typ, protowire.BytesType)
						case 2:
							bt.offsets, err = v, want(typ, protowire.BytesType)
						case 3:
							var d uint64
							d, err = varint(typ, v)
							bt.dtype = DType(d)
						case 4:
							bt.trailing, err = int64s(bt.trailing, typ, v)
						default:
							return false, nil
						}
						return true, err
					})
					if err != nil {
						return true, err
					}
					vals, err := bt.perDatum()
					if err != nil {
						return true, fmt.Errorf("field %q: %w", k, err)
					}
					per[k] = append(per[k], vals...)
					return true, nil
				case 3:
					x, err := varint(typ, v)
					numDatums = int64(x)
					return true, err
				}
				return false, nil
			})
			if err != nil {
				return true, err
			}
			for k, vals := range per {
				if numDatums > 0 && int64(len(vals)) != numDatums {
					return true, fmt.Errorf("field %q has %d datums, num_datums %d", k, len(vals), numDatums)
				}
				numDatums = int64(len(vals))
			}
			base := len(o.Outputs)
			for i := int64(0); i < numDatums; i++ {
				o.Outputs = append(o.Outputs, map[string][]float64{})
			}
			for k, vals := range per {
				for i, x := range vals {
					o.Outputs[base+i][k] = x
				}
			}
			return true, nil
		case 3:
			if err := want(typ, protowire.BytesType); err != nil {
				return true, err
			}
			k, x, err := doubleEntry(v, "MetricsEntry", false)
			o.Metrics[k] = x
			return true, err
		}
		return false, nil
	})
	return o, err
}

// StopReason is tinker_public.StopReason.
type StopReason int32

// The StopReason values.
const (
	StopReasonStop   StopReason = 0
	StopReasonLength StopReason = 1
)

// SampledSequence is tinker_public.SampledSequence.
type SampledSequence struct {
	StopReason StopReason
	Tokens     []int32
	Logprobs   []float32 // nil when the server sent none
}

// SampleResponse is tinker_public.SampleResponse (prompt log-probs are
// not requested by agl and skipped).
type SampleResponse struct {
	Sequences            []SampledSequence
	PromptCacheHitTokens int32
}

// Marshal encodes r as a server does.
func (r SampleResponse) Marshal() []byte {
	var b []byte
	for _, s := range r.Sequences {
		var m []byte
		m = appendVarint(m, 1, uint64(s.StopReason))
		if len(s.Tokens) > 0 {
			m = appendMsg(m, 2, appendInt32s(nil, s.Tokens))
		}
		if s.Logprobs != nil {
			lp := make([]byte, 0, 4*len(s.Logprobs))
			for _, x := range s.Logprobs {
				lp = binary.LittleEndian.AppendUint32(lp, math.Float32bits(x))
			}
			m = appendMsg(m, 3, lp)
		}
		b = appendMsg(b, 1, m)
	}
	return appendVarint(b, 4, uint64(r.PromptCacheHitTokens))
}

// UnmarshalSampleResponse decodes a sample result; unknown fields are
// skipped, an unknown stop reason or ragged token bytes are errors.
func UnmarshalSampleResponse(b []byte) (SampleResponse, error) {
	var r SampleResponse
	err := fields(b, "SampleResponse", false, func(num protowire.Number, typ protowire.Type, v []byte) (bool, error) {
		switch num {
		case 1:
			if err := want(typ, protowire.BytesType); err != nil {
				return true, err
			}
			var s SampledSequence
			err := fields(v, "SampledSequence", false, func(num protowire.Number, typ protowire.Type, v []byte) (bool, error) {
				switch num {
				case 1:
					x, err := varint(typ, v)
					if err == nil && x > uint64(StopReasonLength) {
						err = fmt.Errorf("unknown stop_reason %d", x)
					}
					s.StopReason = StopReason(x)
					return true, err
				case 2, 3:
					if err := want(typ, protowire.BytesType); err != nil {
						return true, err
					}
					if len(v)%4 != 0 {
						return true, fmt.Errorf("%d bytes are not whole 4-byte values", len(v))
					}
					for i := 0; i < len(v); i += 4 {
						x := binary.LittleEndian.Uint32(v[i:])
						if num == 2 {
							s.Tokens = append(s.Tokens, int32(x))
						} else {
							s.Logprobs = append(s.Logprobs, math.Float32frombits(x))
						}
					}
					if num == 3 && s.Logprobs == nil {
						s.Logprobs = []float32{}
					}
					return true, nil
				}
				return false, nil
			})
			r.Sequences = append(r.Sequences, s)
			return true, err
		case 4:
			x, err := varint(typ, v)
			r.PromptCacheHitTokens = int32(x)
			return true, err
		}
		return false, nil
	})
	return r, err
}

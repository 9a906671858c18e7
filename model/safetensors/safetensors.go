// Package safetensors reads and writes the safetensors format
// (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length, a JSON header mapping tensor names to dtype, shape and byte
// offsets, then the raw little-endian tensor data.
//
// Reading decodes F32, F16 and BF16 tensors to float32; writing stores F32.
package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// Tensor is a dense float32 tensor in row-major order.
type Tensor struct {
	Shape []int
	Data  []float32
}

// Size is the number of elements the shape describes.
func (t Tensor) Size() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is the content of one safetensors file.
type File struct {
	Tensors  map[string]Tensor
	Metadata map[string]string
}

type headerEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// maxHeader bounds the JSON header to reject corrupt files early.
const maxHeader = 100 << 20

// ReadFile reads a safetensors file.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	f, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	return f, nil
}

// Decode parses the bytes of a safetensors file.
func Decode(data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("file too short (%d bytes)", len(data))
	}
	n := binary.LittleEndian.Uint64(data[:8])
	if n > maxHeader || 8+n > uint64(len(data)) {
		return nil, fmt.Errorf("bad header length %d (file is %d bytes)", n, len(data))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &raw); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	body := data[8+n:]
	f := &File{Tensors: make(map[string]Tensor, len(raw)), Metadata: map[string]string{}}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &f.Metadata); err != nil {
				return nil, fmt.Errorf("metadata: %w", err)
			}
			continue
		}
		var e headerEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		t, err := decodeTensor(e, body)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		f.Tensors[name] = t
	}
	return f, nil
}

func decodeTensor(e headerEntry, body []byte) (Tensor, error) {
	t := Tensor{Shape: append([]int{}, e.Shape...)}
	size := t.Size()
	begin, end := e.DataOffsets[0], e.DataOffsets[1]
	if begin < 0 || end < begin || end > int64(len(body)) {
		return t, fmt.Errorf("data offsets [%d,%d] outside data of %d bytes", begin, end, len(body))
	}
	b := body[begin:end]
	var width int
	switch e.DType {
	case "F32":
		width = 4
	case "F16", "BF16":
		width = 2
	default:
		return t, fmt.Errorf("unsupported dtype %s", e.DType)
	}
	if len(b) != size*width {
		return t, fmt.Errorf("%s shape %v needs %d bytes, has %d", e.DType, e.Shape, size*width, len(b))
	}
	t.Data = make([]float32, size)
	switch e.DType {
	case "F32":
		for i := range t.Data {
			t.Data[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case "BF16":
		for i := range t.Data {
			t.Data[i] = BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case "F16":
		for i := range t.Data {
			t.Data[i] = F16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	}
	return t, nil
}

// BF16ToFloat32 decodes a bfloat16 (the top 16 bits of a float32).
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F16ToFloat32 decodes an IEEE 754 half-precision float.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: mant * 2^-24
		v := float32(mant) * float32(math.Ldexp(1, -24))
		if sign != 0 {
			v = -v
		}
		return v
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// WriteFile writes tensors as F32 in a safetensors file, names sorted.
func WriteFile(path string, f *File) error {
	tmp := path + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := Encode(out, f); err != nil {
		out.Close()
		os.Remove(tmp)
		return fmt.Errorf("safetensors: %s: %w", path, err)
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// Encode writes f in safetensors format (F32 tensors, names sorted).
func Encode(w io.Writer, f *File) error {
	names := make([]string, 0, len(f.Tensors))
	for name := range f.Tensors {
		names = append(names, name)
	}
	sort.Strings(names)
	header := make(map[string]any, len(names)+1)
	if len(f.Metadata) > 0 {
		header["__metadata__"] = f.Metadata
	}
	var off int64
	for _, name := range names {
		t := f.Tensors[name]
		if t.Size() != len(t.Data) {
			return fmt.Errorf("tensor %q: shape %v has %d elements, data %d", name, t.Shape, t.Size(), len(t.Data))
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		n := int64(4 * len(t.Data))
		header[name] = headerEntry{DType: "F32", Shape: shape, DataOffsets: [2]int64{off, off + n}}
		off += n
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hj)%8 != 0 { // align the data start, as the reference writer does
		hj = append(hj, ' ')
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hj)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(hj); err != nil {
		return err
	}
	buf := make([]byte, 0, 1<<16)
	for _, name := range names {
		for _, v := range f.Tensors[name].Data {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			if len(buf) >= 1<<16 {
				if _, err := w.Write(buf); err != nil {
					return err
				}
				buf = buf[:0]
			}
		}
	}
	if _, err := w.Write(buf); err != nil {
		return err
	}
	return nil
}

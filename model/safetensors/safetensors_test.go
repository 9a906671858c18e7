package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"path/filepath"
	"testing"
)

func TestRoundTripBitExact(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1.5, math.MaxFloat32, math.SmallestNonzeroFloat32,
		float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7fc00123), 3.14159}
	in := &File{
		Tensors: map[string]Tensor{
			"model.embed_tokens.weight":              {Shape: []int{2, 5}, Data: special},
			"model.layers.0.self_attn.q_proj.weight": {Shape: []int{3}, Data: []float32{1, 2, 3}},
			"scalar":                                 {Shape: []int{}, Data: []float32{42}},
		},
		Metadata: map[string]string{"format": "pt"},
	}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := WriteFile(path, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out.Metadata["format"] != "pt" {
		t.Errorf("metadata = %v", out.Metadata)
	}
	if len(out.Tensors) != len(in.Tensors) {
		t.Fatalf("got %d tensors, want %d", len(out.Tensors), len(in.Tensors))
	}
	for name, want := range in.Tensors {
		got, ok := out.Tensors[name]
		if !ok {
			t.Fatalf("missing %q", name)
		}
		if len(got.Shape) != len(want.Shape) {
			t.Fatalf("%s shape %v want %v", name, got.Shape, want.Shape)
		}
		for i := range want.Data {
			if math.Float32bits(got.Data[i]) != math.Float32bits(want.Data[i]) {
				t.Errorf("%s[%d] = %08x want %08x", name, i, math.Float32bits(got.Data[i]), math.Float32bits(want.Data[i]))
			}
		}
	}
}

// rawFile builds a safetensors file by hand, as another writer would.
func rawFile(t *testing.T, dtype string, shape []int, payload []byte) []byte {
	t.Helper()
	h, err := json.Marshal(map[string]any{"w": map[string]any{"dtype": dtype, "shape": shape, "data_offsets": []int{0, len(payload)}}})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(h)))
	b.Write(h)
	b.Write(payload)
	return b.Bytes()
}

func TestDecodeHalfPrecision(t *testing.T) {
	tests := []struct {
		name  string
		dtype string
		bits  []uint16
		want  []float32
	}{
		{"bf16", "BF16", []uint16{0x3f80, 0xc000, 0x4049, 0x0000, 0x8000, 0x7f80}, []float32{1, -2, 3.140625, 0, float32(math.Copysign(0, -1)), float32(math.Inf(1))}},
		{"f16", "F16", []uint16{0x3c00, 0xc000, 0x3555, 0x0001, 0x7bff, 0xfc00}, []float32{1, -2, 0.333251953125, 5.960464477539063e-08, 65504, float32(math.Inf(-1))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p []byte
			for _, b := range tc.bits {
				p = binary.LittleEndian.AppendUint16(p, b)
			}
			f, err := Decode(rawFile(t, tc.dtype, []int{2, 3}, p))
			if err != nil {
				t.Fatal(err)
			}
			got := f.Tensors["w"]
			for i, w := range tc.want {
				if math.Float32bits(got.Data[i]) != math.Float32bits(w) {
					t.Errorf("[%d] = %v want %v", i, got.Data[i], w)
				}
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		data []byte
	}{
		{"short", []byte{1, 2}},
		{"header too long", append(binary.LittleEndian.AppendUint64(nil, 1000), '{', '}')},
		{"bad dtype", rawFile(t, "I64", []int{1}, make([]byte, 8))},
		{"size mismatch", rawFile(t, "F32", []int{3}, make([]byte, 8))},
	}
	for _, tc := range tests {
		if _, err := Decode(tc.data); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

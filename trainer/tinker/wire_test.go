package tinker

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// sdkSchema loads the serialized tinker_public.proto descriptor the SDK
// (SDKVersion) ships, so that our hand-written encoding is checked by an
// independent protobuf implementation.
func sdkSchema(t *testing.T) protoreflect.FileDescriptor {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "tinker_public-"+SDKVersion+".desc"))
	if err != nil {
		t.Fatal(err)
	}
	var fdp descriptorpb.FileDescriptorProto
	if err := proto.Unmarshal(b, &fdp); err != nil {
		t.Fatal(err)
	}
	fd, err := protodesc.NewFile(&fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func dynParse(t *testing.T, fd protoreflect.FileDescriptor, msg string, b []byte) *dynamicpb.Message {
	t.Helper()
	m := dynamicpb.NewMessage(fd.Messages().ByName(protoreflect.Name(msg)))
	if err := (proto.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(b, m); err != nil {
		t.Fatalf("%s: the SDK schema refuses our bytes: %v", msg, err)
	}
	if len(m.GetUnknown()) != 0 {
		t.Fatalf("%s: fields unknown to the SDK schema: %x", msg, m.GetUnknown())
	}
	return m
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: bytes differ from the golden file\ngot  %x\nwant %x", name, got, want)
	}
}

func goldenRequest() ForwardBackwardRequest {
	return ForwardBackwardRequest{
		ModelID: "sess-1:train:0", SeqID: 3, LossFn: "ppo",
		LossFnConfig: map[string]float64{"clip_low_threshold": 0.8, "clip_high_threshold": 1.28},
		Data: []Datum{{
			Tokens: []int32{1, 300, 65535, 7},
			Inputs: map[string]Tensor{
				"target_tokens": Int64Tensor([]int32{300, 65535, 7, 2}),
				"logprobs":      Float32Tensor([]float32{0, -0.5, -1.25, -2}),
				"advantages":    Float32Tensor([]float32{0, 0.75, -0.5, 1}),
			},
		}},
	}
}

func TestForwardBackwardRequestWire(t *testing.T) {
	r := goldenRequest()
	b := r.Marshal()
	golden(t, "forward_backward_request-"+SDKVersion+".bin", b)
	// The SDK's own schema reads every field back.
	m := dynParse(t, sdkSchema(t), "ForwardBackwardRequest", b)
	f := m.Descriptor().Fields()
	if got := m.Get(f.ByName("model_id")).String(); got != r.ModelID {
		t.Errorf("model_id %q", got)
	}
	if got := m.Get(f.ByName("seq_id")).Int(); got != 3 {
		t.Errorf("seq_id %d", got)
	}
	if got := m.Get(f.ByName("loss_fn")).String(); got != "ppo" {
		t.Errorf("loss_fn %q", got)
	}
	cfg := m.Get(f.ByName("loss_fn_config")).Map()
	if cfg.Len() != 2 || cfg.Get(protoreflect.ValueOfString("clip_high_threshold").MapKey()).Float() != 1.28 {
		t.Errorf("loss_fn_config %v", cfg)
	}
	data := m.Get(f.ByName("data")).List()
	if data.Len() != 1 {
		t.Fatalf("%d datums", data.Len())
	}
	d := data.Get(0).Message()
	chunk := d.Get(d.Descriptor().Fields().ByName("model_input")).List().Get(0).Message()
	text := chunk.Get(chunk.Descriptor().Fields().ByName("encoded_text")).Message()
	tok := text.Get(text.Descriptor().Fields().ByName("tokens")).Bytes()
	if len(tok) != 16 || tok[4] != 0x2c || tok[5] != 0x01 { // 300 little-endian int32
		t.Errorf("tokens bytes %x", tok)
	}
	in := d.Get(d.Descriptor().Fields().ByName("loss_fn_inputs")).Map()
	tt := in.Get(protoreflect.ValueOfString("target_tokens").MapKey()).Message()
	tf := tt.Descriptor().Fields()
	if tt.Get(tf.ByName("dtype")).Enum() != 2 || tt.Get(tf.ByName("shape")).List().Get(0).Int() != 4 || len(tt.Get(tf.ByName("dense")).Bytes()) != 32 {
		t.Errorf("target_tokens tensor %v", tt)
	}
	// And our strict decoder reads its own bytes back.
	back, err := UnmarshalForwardBackwardRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, r)
	}
}

func TestForwardBackwardOutputWire(t *testing.T) {
	o := ForwardBackwardOutput{LossFnOutputType: "ArrayRecord",
		Outputs: []map[string][]float64{{"logprobs": {-0.5, -1}}, {"logprobs": {-2, -0.25, -4}}},
		Metrics: map[string]float64{"loss:sum": 1.5}}
	b := o.Marshal()
	golden(t, "forward_backward_output-"+SDKVersion+".bin", b)
	m := dynParse(t, sdkSchema(t), "ForwardBackwardOutput", b)
	recs := m.Get(m.Descriptor().Fields().ByName("loss_fn_outputs")).List()
	rec := recs.Get(0).Message()
	if n := rec.Get(rec.Descriptor().Fields().ByName("num_datums")).Int(); n != 2 {
		t.Errorf("num_datums %d", n)
	}
	back, err := UnmarshalForwardBackwardOutput(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, o) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, o)
	}
}

func TestSampleResponseWire(t *testing.T) {
	r := SampleResponse{Sequences: []SampledSequence{{StopReason: StopReasonStop, Tokens: []int32{5, 9, 2}, Logprobs: []float32{-0.5, -1, -0.125}}},
		PromptCacheHitTokens: 4}
	b := r.Marshal()
	golden(t, "sample_response-"+SDKVersion+".bin", b)
	m := dynParse(t, sdkSchema(t), "SampleResponse", b)
	seq := m.Get(m.Descriptor().Fields().ByName("sequences")).List().Get(0).Message()
	if len(seq.Get(seq.Descriptor().Fields().ByName("logprobs")).Bytes()) != 12 {
		t.Errorf("logprobs bytes")
	}
	back, err := UnmarshalSampleResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, r)
	}
}

// Bytes the SDK schema writes (dynamicpb, from its descriptor) decode the
// same through our decoders: packed and unpacked shapes, bfloat16 and
// int32 outputs, several records.
func TestDecodeSDKEncodedBytes(t *testing.T) {
	fd := sdkSchema(t)
	m := dynamicpb.NewMessage(fd.Messages().ByName("ForwardBackwardOutput"))
	f := m.Descriptor().Fields()
	m.Set(f.ByName("loss_fn_output_type"), protoreflect.ValueOfString("ArrayRecord"))
	recs := m.Mutable(f.ByName("loss_fn_outputs")).List()
	rec := recs.NewElement().Message()
	rf := rec.Descriptor().Fields()
	bt := rec.Mutable(rf.ByName("fields")).Map().Mutable(protoreflect.ValueOfString("logprobs").MapKey()).Message()
	bf := bt.Descriptor().Fields()
	// bfloat16 −0.5 = 0xbf00, −2 = 0xc000; offsets 0, 2, 4 bytes.
	bt.Set(bf.ByName("data"), protoreflect.ValueOfBytes([]byte{0x00, 0xbf, 0x00, 0xc0}))
	bt.Set(bf.ByName("offsets"), protoreflect.ValueOfBytes([]byte{0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0}))
	bt.Set(bf.ByName("dtype"), protoreflect.ValueOfEnum(4))
	rec.Set(rf.ByName("num_datums"), protoreflect.ValueOfInt64(2))
	recs.Append(protoreflect.ValueOfMessage(rec))
	m.Mutable(f.ByName("metrics")).Map().Set(protoreflect.ValueOfString("loss:sum").MapKey(), protoreflect.ValueOfFloat64(3))
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	o, err := UnmarshalForwardBackwardOutput(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string][]float64{{"logprobs": {-0.5}}, {"logprobs": {-2}}}
	if !reflect.DeepEqual(o.Outputs, want) || o.Metrics["loss:sum"] != 3 {
		t.Errorf("got %+v", o)
	}
}

func TestMalformedWire(t *testing.T) {
	good := goldenRequest().Marshal()
	out := ForwardBackwardOutput{LossFnOutputType: "ArrayRecord", Outputs: []map[string][]float64{{"logprobs": {-1, -2}}}}.Marshal()
	sample := SampleResponse{Sequences: []SampledSequence{{Tokens: []int32{1, 2}, Logprobs: []float32{-1, -1}}}}.Marshal()
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"truncated request", func() error { _, err := UnmarshalForwardBackwardRequest(good[:len(good)-3]); return err }, "ForwardBackwardRequest"},
		{"unknown request field", func() error {
			_, err := UnmarshalForwardBackwardRequest(append(append([]byte{}, good...), 0x38, 1)) // field 7 varint
			return err
		}, "unknown field 7"},
		{"truncated output", func() error { _, err := UnmarshalForwardBackwardOutput(out[:len(out)-5]); return err }, "ForwardBackwardOutput"},
		{"truncated sample", func() error { _, err := UnmarshalSampleResponse(sample[:len(sample)-1]); return err }, "SampleResponse"},
		{"ragged tokens", func() error {
			_, err := UnmarshalSampleResponse([]byte{0x0a, 0x03, 0x12, 0x01, 0x05})
			return err
		}, "whole 4-byte"},
		{"bad stop reason", func() error { _, err := UnmarshalSampleResponse([]byte{0x0a, 0x02, 0x08, 0x07}); return err }, "stop_reason 7"},
	} {
		err := tc.err()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
	if v, err := Float32Tensor([]float32{1, float32(math.Inf(-1))}).Values(); err != nil || !math.IsInf(v[1], -1) {
		t.Errorf("Values %v %v", v, err)
	}
	if _, err := (Tensor{DType: DTypeFloat32, Shape: []int64{3}, Dense: make([]byte, 8)}).Values(); err == nil {
		t.Error("a shape that disagrees with the data was accepted")
	}
}

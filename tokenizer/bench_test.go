package tokenizer

import (
	"path/filepath"
	"testing"
)

func benchCorpus(b *testing.B, name string) ([]string, int64) {
	recs := readJSONL[goldenRec](b, filepath.Join(fixtureDir, name, "golden.jsonl"))
	var texts []string
	var n int64
	for _, r := range recs {
		texts = append(texts, r.Text)
		n += int64(len(r.Text))
	}
	return texts, n
}

// BenchmarkEncode encodes the golden corpus (all texts, once per op) with a
// warm pre-token cache ("warm") and with the cache emptied before each pass
// ("cold").
func BenchmarkEncode(b *testing.B) {
	for _, name := range fixtureNames {
		for _, cold := range []bool{false, true} {
			label := name + "/warm"
			if cold {
				label = name + "/cold"
			}
			b.Run(label, func(b *testing.B) {
				tok := fixtureBPE(b, name)
				texts, n := benchCorpus(b, name)
				b.SetBytes(n)
				b.ResetTimer()
				for b.Loop() {
					if cold {
						b.StopTimer()
						tok.mu.Lock()
						clear(tok.cache)
						tok.mu.Unlock()
						b.StartTimer()
					}
					for _, s := range texts {
						tok.Encode(s)
					}
				}
			})
		}
	}
	b.Run("byte", func(b *testing.B) {
		tok, _ := NewByte()
		texts, n := benchCorpus(b, "qwen3")
		b.SetBytes(n)
		for b.Loop() {
			for _, s := range texts {
				tok.Encode(s)
			}
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	for _, name := range fixtureNames {
		b.Run(name, func(b *testing.B) {
			tok := fixtureBPE(b, name)
			recs := readJSONL[goldenRec](b, filepath.Join(fixtureDir, name, "golden.jsonl"))
			var n int64
			for _, r := range recs {
				n += int64(len(r.Text))
			}
			b.SetBytes(n)
			for b.Loop() {
				for _, r := range recs {
					tok.Decode(r.IDs)
				}
			}
		})
	}
}

func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		if _, err := LoadFile(filepath.Join(fixtureDir, "qwen3", "tokenizer.json")); err != nil {
			b.Fatal(err)
		}
	}
}

package sqlite

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/store"
)

// benchEvent is a model_request-sized event: 1,000 prompt and 200
// response token ids with log-probs (about 10 KB of JSON).
func benchEvent() []store.NewEvent {
	var b strings.Builder
	b.WriteString(`{"call_id":"c","prompt_ids":[`)
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, 1000+i*7)
	}
	b.WriteString(`],"response_ids":[`)
	for i := range 200 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, 2000+i*3)
	}
	b.WriteString(`],"response_logprobs":[`)
	for i := range 200 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "-0.%04d", i*37)
	}
	b.WriteString(`]}`)
	return []store.NewEvent{{Type: store.EventModelRequest, Time: time.Now(), Data: json.RawMessage(b.String())}}
}

// BenchmarkJournalAppend times one journal append (encode and checksum:
// "encode"; then its write(2): "append") of one model_request-sized record
// in the record formats:
// none (a length only, no checksum), v1 (the CRC32C of the payload, the
// format before this one) and v2 (v1 plus the CRC32C of the record
// header, the format written now).
func BenchmarkJournalAppend(b *testing.B) {
	evs := benchEvent()
	formats := []struct {
		name   string
		encode func() []byte
	}{
		{"none", func() []byte {
			p := appendPayload(make([]byte, 4, 11000), "rollout-1", "attempt-1", evs)
			binary.LittleEndian.PutUint32(p, uint32(len(p)-4))
			return p
		}},
		{"v1", func() []byte {
			p := appendPayload(make([]byte, 8, 11000), "rollout-1", "attempt-1", evs)
			binary.LittleEndian.PutUint32(p, uint32(len(p)-8))
			binary.LittleEndian.PutUint32(p[4:], crc32.Checksum(p[8:], crcTable))
			return p
		}},
		{"v2", func() []byte { return encodeRecord("rollout-1", "attempt-1", evs) }},
	}
	// The checksums alone, of one v2 record: what v2 adds over none.
	b.Run("v2/checksums", func(b *testing.B) {
		rec := encodeRecord("rollout-1", "attempt-1", evs)
		b.SetBytes(int64(len(rec)))
		for b.Loop() {
			binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(rec[recHeaderLen:], crcTable))
			binary.LittleEndian.PutUint32(rec[8:], crc32.Checksum(rec[:8], crcTable))
		}
	})
	for _, f := range formats {
		b.Run(f.name+"/encode", func(b *testing.B) {
			for b.Loop() {
				f.encode()
			}
		})
	}
	for _, f := range formats {
		b.Run(f.name+"/append", func(b *testing.B) {
			fh, err := os.OpenFile(filepath.Join(b.TempDir(), "j"), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer fh.Close()
			var size int64
			for b.Loop() {
				rec := f.encode()
				if _, err := fh.Write(rec); err != nil {
					b.Fatal(err)
				}
				if size += int64(len(rec)); size > 64<<20 {
					fh.Truncate(0)
					size = 0
				}
			}
		})
	}
}

// BenchmarkJournalRecord times RecordEvents of one model_request-sized
// event (validation, journal append, the applier in the background).
func BenchmarkJournalRecord(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "agl.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateRollouts(ctx, []store.NewRollout{{ID: "r"}}); err != nil {
		b.Fatal(err)
	}
	cl, err := s.Claim(ctx, store.ClaimRequest{WorkerID: "w"})
	if err != nil {
		b.Fatal(err)
	}
	evs := benchEvent()
	for b.Loop() {
		if err := s.RecordEvents(ctx, "r", cl.Attempt.ID, evs); err != nil {
			b.Fatal(err)
		}
	}
}

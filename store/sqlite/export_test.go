package sqlite

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
)

// HoldApply makes stores opened from now on keep journaled events in the
// journal until release is called.
func HoldApply() (release func()) {
	holdApply = make(chan struct{})
	ch := holdApply
	return func() { close(ch); holdApply = nil }
}

// JournalSize is the event journal's length in bytes.
func JournalSize(s *Store) int64 {
	s.journal.mu.Lock()
	defer s.journal.mu.Unlock()
	return s.journal.written
}

// JournalHeld is the bytes of JSON the journal holds for the applier
// (calls journaled while their attempt's previous call waited).
func JournalHeld(s *Store) int64 {
	s.journal.mu.Lock()
	defer s.journal.mu.Unlock()
	return s.journal.held
}

// JournalRecords returns where each record of the journal file at path
// starts, and the file's header length.
func JournalRecords(path string) (starts []int64, header int64, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	v, _, problem := readHeader(data)
	if problem != "" {
		return nil, 0, errors.New(problem)
	}
	off := hdrLen(v)
	for _, e := range scanJournal(data, off, v, false).entries {
		starts = append(starts, off)
		off = e.end
	}
	return starts, hdrLen(v), nil
}

// RewriteJournalV1 rewrites the version 2 journal at path in version 1
// (the format before record-length checksums), as an older agl wrote it.
func RewriteJournalV1(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	_, gen, problem := readHeader(data)
	if problem != "" {
		return errors.New(problem)
	}
	out := binary.LittleEndian.AppendUint64([]byte(journalMagicV1), gen)
	for _, e := range scanJournal(data, headerLen, 2, false).entries {
		p := appendPayload(nil, e.rid, e.aid, e.evs)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(p)))
		out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(p, crcTable))
		out = append(out, p...)
	}
	return os.WriteFile(path, out, 0o644)
}

// SetJournalGen rewrites the generation in the header of the version 2
// journal at path (with a valid header checksum).
func SetJournalGen(path string, gen uint64) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	n := len(journalMagic) + 8
	binary.LittleEndian.PutUint64(data[len(journalMagic):], gen)
	binary.LittleEndian.PutUint32(data[n:], crc32.Checksum(data[:n], crcTable))
	return os.WriteFile(path, data, 0o644)
}

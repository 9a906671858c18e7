package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/aglrl/agl/store"
)

// The event journal makes a recorded event durable with one write(2) to
// an append-only file (path + "-events") instead of a SQLite transaction,
// and copies journaled events into SQLite in the background, many per
// transaction. A write that reached the file survives a crash of the
// process exactly as a commit under synchronous=NORMAL does (both sit in
// the OS page cache until the OS writes them out); so it is used only with
// synchronous=NORMAL.
//
// Invariants:
//   - Journal order is sequence order: events are applied in the order they
//     were written, and every other event write (AppendEvents) first waits
//     for the journal to be applied, so a caller's events keep its order.
//   - Reads see recorded events: ListEvents and the attempt-ending
//     transactions (CompleteAttempt, CancelRollout, Reap) first wait for the
//     journal to be applied.
//   - No event is journaled for an attempt that is not running: RecordEvents
//     checks the attempt's status under gate.RLock; attempt-ending
//     transactions hold gate.Lock while they apply the journal, commit,
//     and forget the cached statuses.
//   - Exactly once: each applying transaction also stores the journal
//     offset it applied through (journal_state); on open, records past it
//     are replayed, a torn last record (never acknowledged) is dropped.
//     The file is replaced by an empty one only when fully applied, after
//     journal_state moved to a new generation, so a crash in between
//     leaves an older generation that is known to be applied.
//   - Never a silent loss: every record carries checksums; a damaged
//     record, header or missing file is a refusal to open (JournalError)
//     until `agl store recover` (Recover) keeps every intact record and
//     reports what was lost.
//   - One writer: the data dir's lock (lock.go) is held while the journal
//     is open; read-only stores never touch it.
type journal struct {
	s *Store

	gate sync.RWMutex // see above

	path string

	mu       sync.Mutex
	f        *os.File
	gen      uint64
	written  int64 // end of the file
	applied  int64 // offset through which SQLite holds the events
	pending  []jentry
	held     int64               // bytes of the pending entries' JSON (jentry.json)
	calls    map[[2]string]int64 // attempt → end of its last journaled model_request not known applied
	advanced chan struct{}       // closed and replaced when applied or err changes
	hold     chan struct{}       // holdApply when the journal opened (tests)
	err      error               // the last apply's error while entries are pending
	broken   error               // the file can no longer be written: record through AppendEvents
	closed   bool

	wake   chan struct{}
	urgent chan struct{} // a reader waits, or enough is pending: apply now
	stop   chan struct{}
	done   chan struct{}

	runMu   sync.Mutex
	running map[[2]string]string // attempt → status, as read while holding gate.RLock
}

type jentry struct {
	rid, aid string
	evs      []store.NewEvent // Data in the stored form (store/codec.go) or JSON
	encs     []store.Encoding // how evs were encoded when recorded; nil when replayed
	// json holds the events as recorded (their JSON) when a call of the
	// attempt was still waiting to be applied as they were encoded: the
	// applier then stores them against that call (see record); nil
	// otherwise, and when replayed.
	json []store.NewEvent
	end  int64 // file offset after the record
}

// The journal's format. A file starts with a header: the magic (which
// names the format version) and the generation, and in version 2 a
// CRC32C of both. Each record is one write(2): in version 2 its length,
// the CRC32C of its payload and the CRC32C of those 8 bytes (so a damaged
// length is told from a record cut short), then the payload. Version 1
// files (no header or length checksums) are still read; the first open
// replays one and starts a version 2 file.
const (
	journalMagicV1 = "agl-ej01"
	journalMagic   = "agl-ej02"
	headerLenV1    = int64(len(journalMagicV1) + 8)
	headerLen      = int64(len(journalMagic) + 8 + 4)
	recHeaderLenV1 = 8
	recHeaderLen   = 12
	// rotateBytes: a fully applied journal longer than this is emptied.
	rotateBytes = 4 << 20
	// maxPendingBytes bounds what may wait to be applied; recording
	// waits beyond it.
	maxPendingBytes = 64 << 20
	// applyBatch bounds the events of one applying transaction.
	applyBatch = 4096
	// The applier lets events gather for up to applyLinger before a
	// transaction, unless applyNow of them are pending or a reader waits
	// (flush): one transaction per event cost a fifth of the gateway's CPU
	// at one client.
	applyLinger = 10 * time.Millisecond
	applyNow    = 512
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// journal_state holds the generation of the journal file in use and the
// offset through which its records are in SQLite; off = 0 says the
// journal was emptied by a clean close (nothing was journaled in gen),
// so a missing file is then no loss.
const journalSchema = `CREATE TABLE IF NOT EXISTS journal_state (
	id INTEGER PRIMARY KEY CHECK (id = 1),
	gen INTEGER NOT NULL,
	off INTEGER NOT NULL
);
INSERT OR IGNORE INTO journal_state (id, gen, off) VALUES (1, 0, 0);`

// openJournal replays what the journal at path holds beyond what SQLite
// has, starts a new generation of it, and starts the applier. It refuses
// a journal it cannot account for (see checkJournal); with rec set it
// recovers instead, reporting into rec.
func openJournal(ctx context.Context, s *Store, path string, rec *Recovery) (*journal, error) {
	if _, err := s.w.ExecContext(ctx, journalSchema); err != nil {
		return nil, fmt.Errorf("sqlite store: journal state: %w", err)
	}
	var dbGen uint64
	var dbOff int64
	if err := s.w.QueryRowContext(ctx, `SELECT gen, off FROM journal_state WHERE id = 1`).Scan(&dbGen, &dbOff); err != nil {
		return nil, fmt.Errorf("sqlite store: journal state: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sqlite store: read event journal: %w", err)
	}
	plan, err := checkJournal(path, data, dbGen, dbOff, rec)
	if err != nil {
		return nil, err
	}
	for _, t := range plan.dropped {
		s.log.Warn("event journal: dropped an incomplete tail (a write that never completed, so never acknowledged)",
			"file", path, "offset", t.Offset, "bytes", t.Length, "reason", t.Reason)
	}
	if len(plan.entries) > 0 {
		if err := s.applyJournal(ctx, plan.entries, plan.gen, plan.entries[len(plan.entries)-1].end); err != nil {
			return nil, fmt.Errorf("sqlite store: replay event journal %s: %w", path, err)
		}
	}
	if rec != nil {
		rec.Records = len(plan.entries)
		for _, e := range plan.entries {
			rec.Events += len(e.evs)
		}
	}
	j := &journal{s: s, path: path, calls: map[[2]string]int64{}, advanced: make(chan struct{}), hold: holdApply, wake: make(chan struct{}, 1), urgent: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), running: map[[2]string]string{}}
	if err := j.reset(ctx, max(plan.gen, dbGen)+1, false); err != nil {
		return nil, err
	}
	go j.applyLoop()
	return j, nil
}

// journalPlan is what opening a journal found: the records to replay (of
// generation gen) and the tails dropped.
type journalPlan struct {
	gen     uint64
	entries []jentry
	dropped []Lost
}

// checkJournal decides what of the journal file data (nil: missing) to
// replay, given the generation and offset SQLite holds. What is safe to
// drop: only a tail that cannot be a completed write — a final record cut
// short (its header checks, its length runs past the end), a header cut
// short, or zeros to the end of the file. A record that is complete and
// checks is always replayed. Anything else (a record that fails its
// checksum or does not parse, a damaged file header, a missing or
// truncated file that SQLite says held records, a generation SQLite does
// not know) is a refusal naming the file, the offset and the recovery
// command; with rec set, it is recovered and reported instead.
func checkJournal(path string, data []byte, dbGen uint64, dbOff int64, rec *Recovery) (journalPlan, error) {
	refuse := func(off int64, format string, args ...any) error {
		return &JournalError{Path: path, Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
	plan := journalPlan{gen: dbGen}
	if len(data) == 0 {
		if dbGen != 0 && dbOff != 0 {
			if rec == nil {
				return plan, refuse(0, "the file is missing or empty, but the database says generation %d was in use (applied through offset %d): events journaled after that are lost", dbGen, dbOff)
			}
			rec.note("the journal was missing or empty, though the database says generation %d was in use (applied through offset %d): events journaled after that (if any) are lost, and their number cannot be known", dbGen, dbOff)
		}
		return plan, nil
	}
	v, fileGen, herr := readHeader(data)
	if herr != "" {
		if rec == nil {
			return plan, refuse(0, "%s", herr)
		}
		// Take the file as the generation SQLite knows (a newer one is
		// written only after SQLite moved to it) and keep every intact
		// record past what SQLite holds, in either format.
		rec.note("the file header was damaged (%s); read as generation %d", herr, dbGen)
		best := scanResult{}
		for _, ver := range []int{2, 1} {
			r := scanJournal(data, max(dbOff, hdrLen(ver)), ver, true)
			if ver == 2 || len(r.entries) > len(best.entries) {
				best = r
			}
		}
		plan.entries = best.entries
		rec.lose(best.lost...)
		return plan, nil
	}
	switch {
	case fileGen < dbGen:
		// Emptied after being fully applied (a crash between moving the
		// database to a new generation and replacing the file).
		return plan, nil
	case fileGen > dbGen:
		if rec == nil {
			return plan, refuse(0, "the file is of generation %d, the database only knows %d (was the data dir opened by two processes?)", fileGen, dbGen)
		}
		r := scanJournal(data, hdrLen(v), v, true)
		rec.note("the journal was of generation %d, the database only knew %d: its %d intact records were applied, and may repeat events already stored", fileGen, dbGen, len(r.entries))
		plan.gen, plan.entries = fileGen, r.entries
		rec.lose(r.lost...)
		return plan, nil
	}
	start := max(dbOff, hdrLen(v))
	if int64(len(data)) < start {
		if rec == nil {
			return plan, refuse(int64(len(data)), "the file ends at %d bytes, but the database applied it through %d: it was truncated, and events journaled after %d are lost", len(data), start, start)
		}
		rec.note("the journal was truncated to %d bytes below the %d the database had applied: events journaled after that (if any) are lost, and their number cannot be known", len(data), start)
		return plan, nil
	}
	r := scanJournal(data, start, v, rec != nil)
	plan.entries = r.entries
	if rec != nil {
		rec.lose(r.lost...)
		return plan, nil
	}
	if r.damage != nil {
		return plan, refuse(r.damage.Offset, "%s; %d bytes follow it (%d intact records before it)", r.damage.Reason, int64(len(data))-r.damage.Offset, len(r.entries))
	}
	plan.dropped = r.lost
	return plan, nil
}

func hdrLen(v int) int64 {
	if v == 1 {
		return headerLenV1
	}
	return headerLen
}

// readHeader returns the file's format version and generation, or why
// the header is not valid.
func readHeader(data []byte) (v int, gen uint64, problem string) {
	switch {
	case len(data) >= int(headerLen) && string(data[:len(journalMagic)]) == journalMagic:
		n := len(journalMagic) + 8
		if crc32.Checksum(data[:n], crcTable) != binary.LittleEndian.Uint32(data[n:]) {
			return 0, 0, "the file header fails its checksum"
		}
		return 2, binary.LittleEndian.Uint64(data[len(journalMagic):]), ""
	case len(data) >= int(headerLenV1) && string(data[:len(journalMagicV1)]) == journalMagicV1:
		return 1, binary.LittleEndian.Uint64(data[len(journalMagicV1):]), ""
	}
	return 0, 0, "the file has no valid header (not an agl event journal, or its header was overwritten)"
}

// reset starts generation gen of the journal: SQLite first moves to it,
// then a file holding only its header replaces the old one (rename: the
// path always holds one whole file), so a crash in between leaves an
// older, fully applied generation. clean marks the journal as emptied by
// a close (see journalSchema). The caller holds j.mu (or nothing runs
// yet) and everything written is applied.
func (j *journal) reset(ctx context.Context, gen uint64, clean bool) error {
	off := headerLen
	if clean {
		off = 0
	}
	if _, err := j.s.w.ExecContext(ctx, `UPDATE journal_state SET gen = ?, off = ? WHERE id = 1`, gen, off); err != nil {
		return fmt.Errorf("sqlite store: journal state: %w", err)
	}
	hdr := make([]byte, headerLen)
	copy(hdr, journalMagic)
	binary.LittleEndian.PutUint64(hdr[len(journalMagic):], gen)
	n := len(journalMagic) + 8
	binary.LittleEndian.PutUint32(hdr[n:], crc32.Checksum(hdr[:n], crcTable))
	tmp := j.path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("sqlite store: new event journal: %w", err)
	}
	if _, err := f.Write(hdr); err != nil {
		f.Close()
		return fmt.Errorf("sqlite store: write event journal header: %w", err)
	}
	if err := os.Rename(tmp, j.path); err != nil {
		f.Close()
		return fmt.Errorf("sqlite store: replace event journal: %w", err)
	}
	if j.f != nil {
		j.f.Close()
	}
	j.f = f
	j.gen, j.written, j.applied = gen, headerLen, headerLen
	return nil
}

// scanResult is what scanJournal found: the intact records, where the
// first damaged one starts (damage), and the byte ranges left out.
type scanResult struct {
	entries []jentry
	damage  *Lost
	lost    []Lost
}

// scanJournal reads the records of a version v file from off. A tail
// that cannot be a completed write (see checkJournal) ends the scan and
// is listed in lost; so is damage, which also sets damage. With resync,
// the scan goes on after damage from the next offset where an intact
// record starts (each range skipped is listed in lost).
func scanJournal(data []byte, off int64, v int, resync bool) scanResult {
	var r scanResult
	for off < int64(len(data)) {
		e, n, kind, why := parseRecord(data, off, v)
		if kind == recOK {
			off += n
			e.end = off
			r.entries = append(r.entries, e)
			continue
		}
		if kind == recTail && v == 2 {
			// Nothing can follow: the header checked and its record
			// runs past the end, or the rest is a header cut short or
			// zeros.
			r.lost = append(r.lost, Lost{Offset: off, Length: int64(len(data)) - off, Reason: why})
			return r
		}
		if kind == recDamage && !resync {
			r.damage = &Lost{Offset: off, Length: int64(len(data)) - off, Reason: why}
			return r
		}
		next := nextIntact(data, off+1, v)
		if kind == recTail && next == int64(len(data)) {
			r.lost = append(r.lost, Lost{Offset: off, Length: int64(len(data)) - off, Reason: why})
			return r
		}
		if kind == recTail {
			// What looked like a tail is followed by an intact record:
			// damage (a version 1 length, say).
			why = fmt.Sprintf("%s, yet an intact record follows at offset %d", why, next)
		}
		if r.damage == nil {
			r.damage = &Lost{Offset: off, Length: int64(len(data)) - off, Reason: why}
		}
		if !resync {
			return r
		}
		r.lost = append(r.lost, Lost{Offset: off, Length: next - off, Reason: why})
		off = next
	}
	return r
}

// nextIntact is the first offset from off where an intact record starts,
// or the end of data.
func nextIntact(data []byte, off int64, v int) int64 {
	for p := off; p < int64(len(data)); p++ {
		if intactAt(data, p, v) {
			return p
		}
	}
	return int64(len(data))
}

const (
	recOK     = iota
	recTail   // an incomplete tail: safe to drop
	recDamage // a damaged record
)

// parseRecord reads the record at off: its entry and length, or why not.
func parseRecord(data []byte, off int64, v int) (jentry, int64, int, string) {
	rem := int64(len(data)) - off
	hl := int64(recHeaderLen)
	if v == 1 {
		hl = recHeaderLenV1
	}
	tailOr := func(why string) (jentry, int64, int, string) {
		if allZero(data[off:]) {
			return jentry{}, 0, recTail, "zeros to the end of the file"
		}
		return jentry{}, 0, recDamage, why
	}
	if rem < hl {
		return jentry{}, 0, recTail, fmt.Sprintf("a record header cut short (%d of %d bytes)", rem, hl)
	}
	h := data[off : off+hl]
	if v == 2 && crc32.Checksum(h[:8], crcTable) != binary.LittleEndian.Uint32(h[8:]) {
		return tailOr("a record header fails its checksum")
	}
	n := int64(binary.LittleEndian.Uint32(h))
	if n > rem-hl {
		// Version 1 cannot tell a damaged length from a record cut short.
		return jentry{}, 0, recTail, fmt.Sprintf("a final record cut short (%d of %d bytes)", rem-hl, n)
	}
	payload := data[off+hl : off+hl+n]
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(h[4:]) {
		return tailOr("a record fails its checksum")
	}
	e, ok := decodeRecord(payload)
	if !ok {
		return jentry{}, 0, recDamage, "a record does not parse"
	}
	return e, hl + n, recOK, ""
}

// intactAt tells whether an intact record starts at off.
func intactAt(data []byte, off int64, v int) bool {
	hl := int64(recHeaderLen)
	if v == 1 {
		hl = recHeaderLenV1
	}
	rem := int64(len(data)) - off
	if rem < hl {
		return false
	}
	h := data[off : off+hl]
	if v == 2 && crc32.Checksum(h[:8], crcTable) != binary.LittleEndian.Uint32(h[8:]) {
		return false
	}
	n := int64(binary.LittleEndian.Uint32(h))
	if n > rem-hl {
		return false
	}
	payload := data[off+hl : off+hl+n]
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(h[4:]) {
		return false
	}
	_, ok := decodeRecord(payload)
	return ok
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func encodeRecord(rid, aid string, evs []store.NewEvent) []byte {
	size := recHeaderLen + 3*binary.MaxVarintLen64 + len(rid) + len(aid)
	for _, e := range evs {
		size += 3*binary.MaxVarintLen64 + len(e.Type) + len(e.Data)
	}
	b := make([]byte, recHeaderLen, size)
	b = appendPayload(b, rid, aid, evs)
	binary.LittleEndian.PutUint32(b, uint32(len(b)-recHeaderLen))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[recHeaderLen:], crcTable))
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b[:8], crcTable))
	return b
}

// appendPayload appends a record's payload: the attempt, then each event.
func appendPayload(b []byte, rid, aid string, evs []store.NewEvent) []byte {
	str := func(s []byte) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	str([]byte(rid))
	str([]byte(aid))
	b = binary.AppendUvarint(b, uint64(len(evs)))
	for _, e := range evs {
		str([]byte(e.Type))
		b = binary.AppendVarint(b, ts(e.Time))
		str(e.Data)
	}
	return b
}

func decodeRecord(p []byte) (jentry, bool) {
	e, ok := decodeRecordShared(p)
	for i := range e.evs {
		e.evs[i].Data = bytes.Clone(e.evs[i].Data)
	}
	return e, ok
}

// decodeRecordShared is decodeRecord with the events' data pointing into p.
func decodeRecordShared(p []byte) (jentry, bool) {
	var e jentry
	bad := false
	str := func() []byte {
		n, k := binary.Uvarint(p)
		if k <= 0 || uint64(len(p)-k) < n {
			bad = true
			return nil
		}
		s := p[k : k+int(n)]
		p = p[k+int(n):]
		return s
	}
	e.rid, e.aid = string(str()), string(str())
	n, k := binary.Uvarint(p)
	if bad || k <= 0 || n > uint64(len(p)) {
		return e, false
	}
	p = p[k:]
	for range n {
		var ev store.NewEvent
		ev.Type = string(str())
		t, k := binary.Varint(p)
		if bad || k <= 0 {
			return e, false
		}
		p = p[k:]
		ev.Time = fromTS(t)
		ev.Data = str()
		if bad {
			return e, false
		}
		e.evs = append(e.evs, ev)
	}
	return e, len(p) == 0
}

// record journals validated events of a running attempt. It returns
// errJournalOff when the journal cannot take them (the caller appends
// them instead).
func (j *journal) record(ctx context.Context, rid, aid string, evs []store.NewEvent) error {
	j.gate.RLock()
	defer j.gate.RUnlock()
	if err := j.checkRunning(ctx, rid, aid); err != nil {
		return err
	}
	// The journal holds each event in its stored form: a call is
	// encoded against the latest committed call of its attempt and
	// agent, so it writes what is new, not the whole history, and each
	// record reads back on its own. A call of the attempt may still wait
	// to be applied (the next call of an agent without think time comes
	// before the applier's transaction): this call is then journaled
	// against an older call, without waiting, and keeps its JSON in
	// memory (jentry.json) so that the applier stores it against its
	// agent's latest call, as if it had waited. Only a record replayed
	// after a crash is stored as journaled.
	var encs []store.Encoding
	var held []store.NewEvent
	var heldBytes int64
	if !j.s.plain && hasCall(evs) && j.callPending(rid, aid) {
		held = slices.Clone(evs)
		for i := range held {
			if held[i].Type == store.EventModelRequest {
				held[i].Data = bytes.Clone(held[i].Data)
				heldBytes += int64(len(held[i].Data))
			}
		}
	}
	if !j.s.plain {
		encs = make([]store.Encoding, len(evs))
		b := j.s.bases.BatchFrom(baseSource{ctx, j.s.r})
		evs = slices.Clone(evs)
		for i := range evs {
			encs[i] = b.Encode(rid, aid, evs[i])
			evs[i].Data = encs[i].Data
		}
	}
	rec := encodeRecord(rid, aid, evs)
	// The events wait in memory until applied: keep them from the
	// caller's later changes (they point into rec, written once).
	ent, _ := decodeRecordShared(rec[recHeaderLen:])
	evs = ent.evs
	j.mu.Lock()
	defer j.mu.Unlock()
	for {
		switch {
		case j.closed:
			return store.ErrStoreClosing
		case j.broken != nil:
			return errJournalOff
		case j.err != nil:
			return fmt.Errorf("sqlite store: event journal: applying failed: %w", j.err)
		}
		if j.written-j.applied+j.held < maxPendingBytes {
			break
		}
		// Too much waits to be applied: wait for the applier.
		ch := j.advanced
		j.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			j.mu.Lock()
			return fmt.Errorf("sqlite store: event journal backlog: %w", ctx.Err())
		}
		j.mu.Lock()
	}
	if _, err := j.f.Write(rec); err != nil {
		// Drop a partial record; if that fails too, stop journaling.
		if terr := j.f.Truncate(j.written); terr != nil {
			j.broken = terr
		}
		return fmt.Errorf("sqlite store: write event journal: %w", err)
	}
	j.written += int64(len(rec))
	j.held += heldBytes
	j.pending = append(j.pending, jentry{rid: rid, aid: aid, evs: evs, encs: encs, json: held, end: j.written})
	if hasCall(evs) {
		j.calls[[2]string{rid, aid}] = j.written
	}
	poke(j.wake)
	if len(j.pending) >= applyNow {
		poke(j.urgent)
	}
	return nil
}

var errJournalOff = errors.New("event journal off")

func hasCall(evs []store.NewEvent) bool {
	return slices.ContainsFunc(evs, func(e store.NewEvent) bool { return e.Type == store.EventModelRequest })
}

// callPending tells whether a model_request event of the attempt is
// journaled and not yet applied (rarely: the applier lingers applyLinger,
// and a model's next call usually comes after its answer took longer).
func (j *journal) callPending(rid, aid string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	end, ok := j.calls[[2]string{rid, aid}]
	return ok && j.applied < end
}

// holdApply, when set (by tests, before Open), holds the applier of the
// stores opened from then on until it is closed: journaled events then
// wait in the journal only. Each journal reads it once, when it opens.
var holdApply chan struct{}

// checkRunning fails unless the attempt is running; the caller holds
// gate.RLock, so no attempt-ending transaction runs meanwhile.
func (j *journal) checkRunning(ctx context.Context, rid, aid string) error {
	k := [2]string{rid, aid}
	j.runMu.Lock()
	st, ok := j.running[k]
	j.runMu.Unlock()
	if !ok {
		err := j.s.r.QueryRowContext(ctx, `SELECT status FROM attempts WHERE id = ? AND rollout_id = ?`, aid, rid).Scan(&st)
		if errors.Is(err, sql.ErrNoRows) {
			return store.Errorf(store.ErrNotFound, "attempt %q of rollout %q", aid, rid)
		}
		if err != nil {
			return fmt.Errorf("sqlite store: attempt status: %w", err)
		}
		j.runMu.Lock()
		if len(j.running) >= 1<<16 {
			clear(j.running)
		}
		j.running[k] = st
		j.runMu.Unlock()
	}
	if st != string(store.AttemptRunning) {
		return store.Errorf(store.ErrConflict, "attempt %s is %s, not running: events are closed", aid, st)
	}
	return nil
}

// flush waits until everything journaled so far is in SQLite.
func (j *journal) flush(ctx context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	// A new generation starts only once everything before was applied.
	target, gen := j.written, j.gen
	for j.gen == gen && j.applied < target {
		if j.err != nil {
			return fmt.Errorf("sqlite store: event journal: applying failed: %w", j.err)
		}
		ch := j.advanced
		poke(j.wake)
		poke(j.urgent)
		j.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			j.mu.Lock()
			return fmt.Errorf("sqlite store: wait for event journal: %w", ctx.Err())
		}
		j.mu.Lock()
	}
	return nil
}

// exclusive runs fn, an attempt-ending transaction, with no event being
// journaled, after the journal was applied; it then forgets the cached
// attempt statuses.
func (j *journal) exclusive(ctx context.Context, fn func() error) error {
	j.gate.Lock()
	defer j.gate.Unlock()
	if err := j.flush(ctx); err != nil {
		return err
	}
	err := fn()
	j.runMu.Lock()
	clear(j.running)
	j.runMu.Unlock()
	return err
}

// poke signals ch (capacity 1) without blocking: j.wake starts the
// applier, j.urgent ends its linger.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (j *journal) notify() {
	close(j.advanced)
	j.advanced = make(chan struct{})
}

// applyLoop copies journaled events into SQLite until stopped, then
// applies what is left.
func (j *journal) applyLoop() {
	defer close(j.done)
	backoff := time.Millisecond
	for {
		stopping := false
		select {
		case <-j.wake:
		case <-j.stop:
			stopping = true
		}
		if !stopping {
			t := time.NewTimer(applyLinger)
			select {
			case <-t.C:
			case <-j.urgent:
			case <-j.stop:
				stopping = true
			}
			t.Stop()
		}
		for {
			j.mu.Lock()
			n, events := 0, 0
			for _, e := range j.pending {
				if n > 0 && events+len(e.evs) > applyBatch {
					break
				}
				n, events = n+1, events+len(e.evs)
			}
			// A copy: the queue's array is reused once the batch is applied.
			batch := append([]jentry(nil), j.pending[:n]...)
			gen := j.gen
			j.mu.Unlock()
			if n == 0 {
				break
			}
			if j.hold != nil {
				select {
				case <-j.hold:
				case <-j.stop:
					return
				}
			}
			err := j.s.applyJournal(context.Background(), batch, gen, batch[n-1].end)
			j.mu.Lock()
			if err != nil {
				j.err = err
				j.notify()
				j.mu.Unlock()
				select {
				case <-time.After(backoff):
				case <-j.stop:
					if stopping {
						return // Close gave up; the entries stay journaled
					}
					stopping = true
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			backoff = time.Millisecond
			for _, e := range batch {
				for _, ev := range e.json {
					if ev.Type == store.EventModelRequest {
						j.held -= int64(len(ev.Data))
					}
				}
			}
			j.pending = append(j.pending[:0], j.pending[n:]...)
			j.applied, j.err = batch[n-1].end, nil
			for k, end := range j.calls {
				if end <= j.applied {
					delete(j.calls, k)
				}
			}
			j.notify()
			j.mu.Unlock()
		}
		if stopping {
			return
		}
		j.maybeRotate()
	}
}

// maybeRotate empties a long, fully applied journal, unless events are
// being journaled or an attempt-ending transaction runs.
func (j *journal) maybeRotate() {
	j.mu.Lock()
	long := j.written > rotateBytes
	j.mu.Unlock()
	if !long || !j.gate.TryLock() {
		return
	}
	defer j.gate.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.applied != j.written || j.closed {
		return
	}
	if err := j.reset(context.Background(), j.gen+1, false); err != nil {
		j.broken = err
	}
}

// close applies what is journaled and stops the applier.
func (j *journal) close() error {
	j.gate.Lock()
	j.mu.Lock()
	j.closed = true
	j.mu.Unlock()
	j.gate.Unlock()
	close(j.stop)
	<-j.done
	j.mu.Lock()
	defer j.mu.Unlock()
	var err error
	if j.applied == j.written && j.broken == nil {
		err = j.reset(context.Background(), j.gen+1, true)
	}
	return errors.Join(err, j.f.Close())
}

// applyJournal inserts journaled entries in one transaction, with the
// journal offset they end at.
func (s *Store) applyJournal(ctx context.Context, entries []jentry, gen uint64, end int64) error {
	var enc *store.EncodeBatch
	err := s.tx(ctx, func(tx wtx) error {
		enc = s.bases.BatchFrom(baseSource{ctx, s.r})
		ins, err := tx.stmt(ctx, `INSERT INTO events (rollout_id, attempt_id, type, time, data) VALUES (?,?,?,?,?)`)
		if err != nil {
			return fmt.Errorf("sqlite store: prepare: %w", err)
		}
		for _, e := range entries {
			for i, ev := range e.evs {
				var err error
				switch {
				case e.json != nil && e.json[i].Type == store.EventModelRequest:
					// Stored against the attempt's latest call, which
					// may have been journaled after this one was encoded.
					// The gateway's own encoding, or the journal's when
					// there is none, is reused where its base is that call.
					js := e.json[i]
					if js.Encoded == nil {
						js.Encoded = &e.encs[i]
					}
					_, err = s.insertEncoded(ctx, ins, enc, e.rid, e.aid, ev, enc.Encode(e.rid, e.aid, js))
				case e.encs != nil:
					_, err = s.insertEncoded(ctx, ins, enc, e.rid, e.aid, ev, e.encs[i])
				default:
					_, err = s.insertEvent(ctx, ins, enc, e.rid, e.aid, ev)
				}
				if err != nil {
					return fmt.Errorf("journaled event: %w", err)
				}
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE journal_state SET gen = ?, off = ? WHERE id = 1`, gen, end); err != nil {
			return fmt.Errorf("sqlite store: journal state: %w", err)
		}
		return nil
	})
	if err == nil {
		enc.Commit()
	}
	return err
}

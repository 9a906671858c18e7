package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
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
//     The file is emptied only when fully applied, after journal_state moved
//     to a new generation, so a crash in between leaves an older generation
//     that is known to be applied.
type journal struct {
	s *Store

	gate sync.RWMutex // see above

	mu       sync.Mutex
	f        *os.File
	gen      uint64
	written  int64 // end of the file
	applied  int64 // offset through which SQLite holds the events
	pending  []jentry
	advanced chan struct{} // closed and replaced when applied or err changes
	err      error         // the last apply's error while entries are pending
	broken   error         // the file can no longer be written: record through AppendEvents
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
	evs      []store.NewEvent
	end      int64 // file offset after the record
}

const (
	journalMagic = "agl-ej01"
	headerLen    = int64(len(journalMagic) + 8)
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

const journalSchema = `CREATE TABLE IF NOT EXISTS journal_state (
	id INTEGER PRIMARY KEY CHECK (id = 1),
	gen INTEGER NOT NULL,
	off INTEGER NOT NULL
);
INSERT OR IGNORE INTO journal_state (id, gen, off) VALUES (1, 0, 0);`

// openJournal replays what the journal at path holds beyond what SQLite
// has, empties it, and starts the applier.
func openJournal(ctx context.Context, s *Store, path string) (*journal, error) {
	if _, err := s.w.ExecContext(ctx, journalSchema); err != nil {
		return nil, fmt.Errorf("sqlite store: journal state: %w", err)
	}
	var dbGen uint64
	var dbOff int64
	if err := s.w.QueryRowContext(ctx, `SELECT gen, off FROM journal_state WHERE id = 1`).Scan(&dbGen, &dbOff); err != nil {
		return nil, fmt.Errorf("sqlite store: journal state: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: open event journal: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("sqlite store: read event journal: %w", err)
	}
	gen := dbGen
	if len(data) > 0 {
		if int64(len(data)) < headerLen || string(data[:len(journalMagic)]) != journalMagic {
			f.Close()
			return nil, fmt.Errorf("sqlite store: event journal %s has no valid header: refusing to drop it", path)
		}
		fileGen := binary.LittleEndian.Uint64(data[len(journalMagic):headerLen])
		switch {
		case fileGen > dbGen:
			f.Close()
			return nil, fmt.Errorf("sqlite store: event journal %s is of generation %d, the database only knows %d", path, fileGen, dbGen)
		case fileGen == dbGen:
			entries, _ := parseJournal(data, max(dbOff, headerLen))
			if len(entries) > 0 {
				if err := s.applyJournal(ctx, entries, dbGen, entries[len(entries)-1].end); err != nil {
					f.Close()
					return nil, fmt.Errorf("sqlite store: replay event journal: %w", err)
				}
			}
		}
		// fileGen < dbGen: emptied after being fully applied; nothing to do.
		gen = max(fileGen, dbGen)
	}
	j := &journal{s: s, f: f, advanced: make(chan struct{}), wake: make(chan struct{}, 1), urgent: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), running: map[[2]string]string{}}
	if err := j.reset(ctx, gen+1); err != nil {
		f.Close()
		return nil, err
	}
	go j.applyLoop()
	return j, nil
}

// reset empties the file as generation gen; the caller holds j.mu (or
// nothing runs yet) and everything written is applied.
func (j *journal) reset(ctx context.Context, gen uint64) error {
	if _, err := j.s.w.ExecContext(ctx, `UPDATE journal_state SET gen = ?, off = ? WHERE id = 1`, gen, headerLen); err != nil {
		return fmt.Errorf("sqlite store: journal state: %w", err)
	}
	hdr := make([]byte, headerLen)
	copy(hdr, journalMagic)
	binary.LittleEndian.PutUint64(hdr[len(journalMagic):], gen)
	if err := j.f.Truncate(0); err != nil {
		return fmt.Errorf("sqlite store: empty event journal: %w", err)
	}
	if _, err := j.f.Write(hdr); err != nil {
		return fmt.Errorf("sqlite store: write event journal header: %w", err)
	}
	j.gen, j.written, j.applied = gen, headerLen, headerLen
	return nil
}

// parseJournal reads the records from off; it stops at the first torn or
// corrupt one and returns where the valid records end.
func parseJournal(data []byte, off int64) ([]jentry, int64) {
	var out []jentry
	for {
		if int64(len(data))-off < 8 {
			return out, off
		}
		n := int64(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		if int64(len(data))-off-8 < n {
			return out, off
		}
		payload := data[off+8 : off+8+n]
		if crc32.Checksum(payload, crcTable) != sum {
			return out, off
		}
		e, ok := decodeRecord(payload)
		if !ok {
			return out, off
		}
		off += 8 + n
		e.end = off
		out = append(out, e)
	}
}

func encodeRecord(rid, aid string, evs []store.NewEvent) []byte {
	size := 8 + 3*binary.MaxVarintLen64 + len(rid) + len(aid)
	for _, e := range evs {
		size += 3*binary.MaxVarintLen64 + len(e.Type) + len(e.Data)
	}
	b := make([]byte, 8, size)
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
	binary.LittleEndian.PutUint32(b, uint32(len(b)-8))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:], crcTable))
	return b
}

func decodeRecord(p []byte) (jentry, bool) {
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
		ev.Data = bytes.Clone(str())
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
	rec := encodeRecord(rid, aid, evs)
	// The events wait in memory until applied: keep them from the
	// caller's later changes.
	evs = slices.Clone(evs)
	for i := range evs {
		evs[i].Data = bytes.Clone(evs[i].Data)
	}
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
		if j.written-j.applied < maxPendingBytes {
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
	j.pending = append(j.pending, jentry{rid: rid, aid: aid, evs: evs, end: j.written})
	poke(j.wake)
	if len(j.pending) >= applyNow {
		poke(j.urgent)
	}
	return nil
}

var errJournalOff = errors.New("event journal off")

// holdApply, when set (by tests, before Open), holds the applier until it
// is closed: journaled events then wait in the journal only.
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
			if holdApply != nil {
				select {
				case <-holdApply:
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
			j.pending = append(j.pending[:0], j.pending[n:]...)
			j.applied, j.err = batch[n-1].end, nil
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
	if err := j.reset(context.Background(), j.gen+1); err != nil {
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
		err = j.reset(context.Background(), j.gen+1)
	}
	return errors.Join(err, j.f.Close())
}

// applyJournal inserts journaled entries in one transaction, with the
// journal offset they end at.
func (s *Store) applyJournal(ctx context.Context, entries []jentry, gen uint64, end int64) error {
	return s.tx(ctx, func(tx wtx) error {
		ins, err := tx.stmt(ctx, `INSERT INTO events (rollout_id, attempt_id, type, time, data) VALUES (?,?,?,?,?)`)
		if err != nil {
			return fmt.Errorf("sqlite store: prepare: %w", err)
		}
		for _, e := range entries {
			for _, ev := range e.evs {
				if _, err := ins.ExecContext(ctx, e.rid, e.aid, ev.Type, ts(ev.Time), []byte(ev.Data)); err != nil {
					return fmt.Errorf("sqlite store: insert journaled event: %w", err)
				}
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE journal_state SET gen = ?, off = ? WHERE id = 1`, gen, end); err != nil {
			return fmt.Errorf("sqlite store: journal state: %w", err)
		}
		return nil
	})
}

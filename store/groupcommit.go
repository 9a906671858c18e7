package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// GroupCommit batches concurrent AppendEvents calls into shared write
// transactions ("group commit"), for backends whose cost per transaction
// (commit, WAL frames, round trips) dominates the cost per event.
//
// No call waits for a timer: a call that finds fewer than MaxInFlight
// transactions in flight commits at once (after yielding the processor
// once), with whatever calls queued meanwhile; calls arriving while
// MaxInFlight transactions are in flight queue up and are committed
// together, in arrival order, by the next transaction, as soon as one in
// flight ends. The transaction is run by one of the waiting callers (the
// first in the queue), so there is no writer goroutine to hand off to.
//
// Semantics are those of Store.AppendEvents, call by call: Append returns
// only after the transaction holding its events committed (so an acked
// append is exactly as durable as the backend's commit), each call's events
// are contiguous and in order, and sequence numbers follow arrival order
// (the order in which calls entered Append; with MaxInFlight > 1, calls
// in flight at the same time are ordered by the backend's locks, as
// concurrent calls always were). A call refused on its own
// (attempt missing or not running) gets its own error and does not affect
// the rest of its batch. When a batch's transaction fails, every call in
// it gets the error and none of its events is stored; a batch that fails
// with ErrInvalid (a value the database refused) is retried one call at a
// time, so that one bad call fails alone.
type GroupCommit struct {
	commit      CommitFunc
	maxEvents   int
	maxBytes    int
	maxInFlight int

	mu       sync.Mutex
	queue    []*Append
	inFlight int // callers committing (or about to); below maxInFlight only with an empty queue
	closed   bool
	idle     sync.Cond // signalled when inFlight drops to 0
}

// Append is one AppendEvents call inside a group commit.
type Append struct {
	RolloutID, AttemptID string
	// Events are validated (ValidateEvents) and have their times set.
	Events []NewEvent

	// Stored or Err is set by the CommitFunc.
	Stored []Event
	Err    error

	state appendState
	wake  chan bool // true: lead batch; false: done
	batch []*Append // handed to a call promoted to lead it
}

type appendState uint8

const (
	queued  appendState = iota
	taken               // in a batch being committed
	leading             // promoted to commit the next batch
)

// CommitFunc writes a batch in one transaction, in order. It sets each
// append's Stored (with store-assigned sequence numbers), or its Err when
// that append alone is refused (ErrNotFound, ErrConflict), in which case
// none of its events may be written. A non-nil return means the
// transaction did not commit: every append of the batch fails with it.
type CommitFunc func(ctx context.Context, batch []*Append) error

// GroupCommitOptions bound a batch. A batch always holds at least one call.
type GroupCommitOptions struct {
	// MaxEvents bounds the events of one transaction (default 4096).
	MaxEvents int
	// MaxBytes bounds the event data of one transaction (default 16 MiB).
	MaxBytes int
	// MaxInFlight bounds the transactions running at once (default 1:
	// one writer, as SQLite has).
	MaxInFlight int
}

// NewGroupCommit returns a group commit writing through commit.
func NewGroupCommit(commit CommitFunc, opt GroupCommitOptions) *GroupCommit {
	if opt.MaxEvents <= 0 {
		opt.MaxEvents = 4096
	}
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = 16 << 20
	}
	if opt.MaxInFlight <= 0 {
		opt.MaxInFlight = 1
	}
	g := &GroupCommit{commit: commit, maxEvents: opt.MaxEvents, maxBytes: opt.MaxBytes, maxInFlight: opt.MaxInFlight}
	g.idle.L = &g.mu
	return g
}

// Append appends validated events to an attempt (see GroupCommit for the
// semantics). A ctx that ends while the call still waits in the queue
// withdraws it (nothing is written and ctx's error is returned); once its
// batch is being committed the call waits for the outcome. The
// transaction itself runs without the callers' cancellation.
func (g *GroupCommit) Append(ctx context.Context, rolloutID, attemptID string, evs []NewEvent) ([]Event, error) {
	a := &Append{RolloutID: rolloutID, AttemptID: attemptID, Events: evs}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, ErrStoreClosing
	}
	if g.inFlight < g.maxInFlight {
		// Room for another transaction (so the queue is empty): a leads
		// one now.
		g.inFlight++
		a.state = taken
		g.mu.Unlock()
		// Let goroutines that are about to append (on a busy machine,
		// other calls' handlers) join this transaction: on a loaded
		// machine this tripled the calls per transaction; alone, it costs
		// nothing measurable.
		runtime.Gosched()
		g.mu.Lock()
		batch := g.take([]*Append{a})
		g.mu.Unlock()
		g.lead(context.WithoutCancel(ctx), a, batch)
		return a.Stored, a.Err
	}
	g.queue = append(g.queue, a)
	a.wake = make(chan bool, 1)
	g.mu.Unlock()
	var lead bool
	select {
	case lead = <-a.wake:
	case <-ctx.Done():
		g.mu.Lock()
		if a.state == queued {
			g.remove(a)
			g.mu.Unlock()
			return nil, fmt.Errorf("append events: %w", ctx.Err())
		}
		g.mu.Unlock()
		// Taken into a batch (maybe to lead it): see it through.
		lead = <-a.wake
	}
	if lead {
		g.lead(context.WithoutCancel(ctx), a, a.batch)
	}
	return a.Stored, a.Err
}

// remove drops a queued append; the caller holds g.mu.
func (g *GroupCommit) remove(a *Append) {
	for i, q := range g.queue {
		if q == a {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return
		}
	}
}

// take extends batch with calls popped off the queue, in arrival order,
// within the bounds (an empty batch takes at least one call); the caller
// holds g.mu.
func (g *GroupCommit) take(batch []*Append) []*Append {
	events, bytes := 0, 0
	for _, a := range batch {
		events, bytes = events+len(a.Events), bytes+a.size()
	}
	n := 0
	for _, a := range g.queue {
		size := a.size()
		if len(batch) > 0 && (events+len(a.Events) > g.maxEvents || bytes+size > g.maxBytes) {
			break
		}
		a.state = taken
		batch = append(batch, a)
		n, events, bytes = n+1, events+len(a.Events), bytes+size
	}
	g.queue = append(g.queue[:0], g.queue[n:]...)
	return batch
}

func (a *Append) size() int {
	n := 0
	for _, e := range a.Events {
		n += len(e.Data)
	}
	return n
}

// lead commits batch (which holds self), then hands the next queued batch,
// if any, to its first call to lead, and wakes batch's other callers.
func (g *GroupCommit) lead(ctx context.Context, self *Append, batch []*Append) {
	panicked := true
	defer func() {
		if panicked {
			for _, a := range batch {
				a.Stored, a.Err = nil, errors.New("append events: group commit panicked")
			}
		}
		g.mu.Lock()
		var next *Append
		if len(g.queue) > 0 {
			nb := g.take(nil)
			next = nb[0]
			next.batch = nb
		} else if g.inFlight--; g.inFlight == 0 {
			g.idle.Broadcast()
		}
		g.mu.Unlock()
		if next != nil {
			next.wake <- true
		}
		for _, a := range batch {
			if a != self {
				a.wake <- false
			}
		}
	}()
	g.run(ctx, batch)
	panicked = false
}

// run commits batch and sets every append's outcome.
func (g *GroupCommit) run(ctx context.Context, batch []*Append) {
	err := g.commit(ctx, batch)
	if err == nil {
		return
	}
	if len(batch) > 1 && errors.Is(err, ErrInvalid) {
		// Some call carried a value the database refused: find it by
		// committing one call at a time.
		for _, a := range batch {
			a.Stored, a.Err = nil, nil
			g.run(ctx, []*Append{a})
		}
		return
	}
	for _, a := range batch {
		a.Stored, a.Err = nil, err
	}
}

// Close waits for the transaction in flight and every queued call to
// finish; later Appends fail with ErrStoreClosing.
func (g *GroupCommit) Close() {
	g.mu.Lock()
	g.closed = true
	for g.inFlight > 0 {
		g.idle.Wait()
	}
	g.mu.Unlock()
}

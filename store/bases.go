package store

import (
	"bytes"
	"container/list"
	"fmt"
	"sync"
)

// Bases remembers the CallBases of recently stored and read model_request
// events, bounded in bytes: the latest of each (rollout, attempt, agent),
// which the next call of that agent is encoded against, and those readers
// decoded. It is only a cache: an event encoded without a base (a miss
// after a restart, or on another gateway replica) is stored whole, and
// every base a stored event names is decoded from the store when it is
// not here. Safe for concurrent use.
type Bases struct {
	mu    sync.Mutex
	max   int64
	size  int64
	lru   list.List // of *baseEntry, most recent first
	bySeq map[int64]*list.Element
	byKey map[baseKey]*list.Element
}

type baseKey struct{ rid, aid, agent string }

type baseEntry struct {
	b   *CallBase
	key *baseKey // nil: not the latest of a key
}

// DefaultBasesBytes bounds a store's Bases.
const DefaultBasesBytes = 256 << 20

// NewBases returns an empty cache holding up to maxBytes of bases.
func NewBases(maxBytes int64) *Bases {
	return &Bases{max: maxBytes, bySeq: map[int64]*list.Element{}, byKey: map[baseKey]*list.Element{}}
}

func (c *Bases) latest(k baseKey) *CallBase {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[k]; ok {
		c.lru.MoveToFront(el)
		return el.Value.(*baseEntry).b
	}
	return nil
}

// Get returns the base of event seq, nil when not cached.
func (c *Bases) Get(seq int64) *CallBase {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.bySeq[seq]; ok {
		c.lru.MoveToFront(el)
		return el.Value.(*baseEntry).b
	}
	return nil
}

// put caches b (b.Seq set), as the latest of k when k is not nil and b is
// newer than what k had.
func (c *Bases) put(k *baseKey, b *CallBase) {
	sz := b.size()
	if sz > c.max/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k != nil {
		if el, ok := c.byKey[*k]; ok {
			old := el.Value.(*baseEntry)
			if old.b.Seq >= b.Seq {
				return
			}
			old.key = nil
			delete(c.byKey, *k)
		}
	}
	if el, ok := c.bySeq[b.Seq]; ok {
		e := el.Value.(*baseEntry)
		if k != nil {
			kk := *k
			e.key = &kk
			c.byKey[kk] = el
		}
		c.lru.MoveToFront(el)
		return
	}
	e := &baseEntry{b: b}
	el := c.lru.PushFront(e)
	c.bySeq[b.Seq] = el
	if k != nil {
		kk := *k
		e.key = &kk
		c.byKey[kk] = el
	}
	c.size += sz
	for c.size > c.max {
		back := c.lru.Back()
		be := back.Value.(*baseEntry)
		c.lru.Remove(back)
		delete(c.bySeq, be.b.Seq)
		if be.key != nil {
			delete(c.byKey, *be.key)
		}
		c.size -= be.b.size()
	}
}

// Forget drops what is cached of one attempt (it ended: no call of it
// will be encoded again).
func (c *Bases) Forget(rid, aid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, el := range c.byKey {
		if k.rid == rid && k.aid == aid {
			be := el.Value.(*baseEntry)
			c.lru.Remove(el)
			delete(c.byKey, k)
			delete(c.bySeq, be.b.Seq)
			c.size -= be.b.size()
		}
	}
}

// EncodeBatch encodes the events of one write transaction: an event may be
// encoded against one stored earlier in the same transaction, and what
// the transaction stored becomes a base for later calls only once it
// committed (Commit).
type EncodeBatch struct {
	c       *Bases
	src     BaseSource
	pending map[baseKey]*CallBase
}

// BaseSource reads a backend's stored events for a base that is not
// cached (after a restart, or evicted), so that a call is stored against
// the same base whatever the cache holds.
type BaseSource interface {
	// RecentCalls returns the stored forms of an attempt's latest
	// committed model_request events, newest first, at most n.
	RecentCalls(rid, aid string, n int) ([]Event, error)
	// EventData returns the stored data of event seq.
	EventData(seq int64) ([]byte, error)
}

// recentCalls bounds the events read to find an attempt's latest call of
// one agent when it is not cached.
const recentCalls = 16

// Batch starts the encoding of one write transaction with no BaseSource:
// a call whose base is not cached is stored whole.
func (c *Bases) Batch() *EncodeBatch { return c.BatchFrom(nil) }

// BatchFrom starts the encoding of one write transaction; a base not
// cached is read from src.
func (c *Bases) BatchFrom(src BaseSource) *EncodeBatch { return &EncodeBatch{c: c, src: src} }

// Encoding is one event's stored form, with what Stored needs.
type Encoding struct {
	Data  []byte // the stored form
	self  *CallBase
	agent string
	base  *CallBase // what Data was encoded against; nil: none
	coded bool      // a model_request event, encoded (see EncodeEvent)
}

// reuse returns e's stored form encoded against base (its Seq set) when
// e was encoded against a base holding the same ids and request (or
// both against none): the encoding depends on the base's content only,
// so the form is the same but for the base's sequence number.
func (e *Encoding) reuse(base *CallBase) (Encoding, bool) {
	if (e.base == nil) != (base == nil) {
		return Encoding{}, false
	}
	if base != nil && (!bytes.Equal(e.base.IDs, base.IDs) || !bytes.Equal(e.base.Request, base.Request)) {
		return Encoding{}, false
	}
	out := Encoding{Data: e.Data, agent: e.agent, base: base, coded: true}
	if base != nil && Encoded(e.Data) {
		out.Data = withBaseSeq(e.Data, base.Seq)
	}
	if e.self != nil {
		// The writer's own copy gets the writer's sequence number.
		out.self = &CallBase{IDs: e.self.IDs, Request: e.self.Request}
	}
	return out, true
}

// Encode returns the stored form of event e of attempt (rid, aid), found
// by its Layout when it has one. Events other than model_request are
// stored as their JSON.
func (b *EncodeBatch) Encode(rid, aid string, e NewEvent) Encoding {
	data := e.Data
	if e.Type != EventModelRequest {
		return Encoding{Data: data}
	}
	if e.Encoded != nil && e.Encoded.coded {
		// The writer found the event's agent: no need to scan it.
		if en, ok := e.Encoded.reuse(b.base(baseKey{rid, aid, e.Encoded.agent})); ok {
			return en
		}
	}
	var holes []span
	var agent string
	ok := false
	if e.Layout != nil {
		holes, ok = e.Layout.holes(data)
		agent = e.Layout.Agent
	}
	if !ok {
		var ag []byte
		if holes, ag, ok = topFields(data); !ok {
			return Encoding{Data: data}
		}
		agent = string(ag)
	}
	k := baseKey{rid, aid, agent}
	base := b.base(k)
	stored, self := encodeScanned(data, holes, base)
	return Encoding{Data: stored, self: self, agent: k.agent, base: base, coded: true}
}

// base returns the latest call of k: stored earlier in this batch,
// cached, or read from the batch's BaseSource; nil when there is none.
func (b *EncodeBatch) base(k baseKey) *CallBase {
	if base := b.pending[k]; base != nil {
		return base
	}
	if base := b.c.latest(k); base != nil {
		return base
	}
	if b.src != nil {
		return b.c.load(k, b.src)
	}
	return nil
}

// load finds the latest committed call of k in src and caches it (with
// the latest of the other agents it reads); nil when there is none or it
// cannot be read (the call is then stored whole, which is still exact).
func (c *Bases) load(k baseKey, src BaseSource) *CallBase {
	evs, err := src.RecentCalls(k.rid, k.aid, recentCalls)
	if err != nil {
		return nil
	}
	var found *CallBase
	seen := map[string]bool{}
	for _, e := range evs {
		var base *CallBase
		if bs := BaseSeq(e.Data); bs != 0 {
			if base, err = c.resolve(bs, src.EventData); err != nil {
				return found
			}
		}
		data, self, err := decodeEvent(e.Data, base, true)
		if err != nil || self == nil {
			continue
		}
		_, ag, ok := topFields(data)
		if !ok || seen[string(ag)] {
			continue
		}
		seen[string(ag)] = true
		self.Seq = e.Seq
		kk := baseKey{k.rid, k.aid, string(ag)}
		c.put(&kk, self)
		if kk == k {
			found = self
			break
		}
	}
	return found
}

// Stored records that enc was stored as event seq of attempt (rid, aid),
// in this transaction.
func (b *EncodeBatch) Stored(rid, aid string, enc Encoding, seq int64) {
	if enc.self == nil {
		return
	}
	enc.self.Seq = seq
	if b.pending == nil {
		b.pending = map[baseKey]*CallBase{}
	}
	b.pending[baseKey{rid, aid, enc.agent}] = enc.self
}

// Commit makes what the committed transaction stored bases of later calls.
func (b *EncodeBatch) Commit() {
	for k, base := range b.pending {
		b.c.put(&k, base)
	}
	b.pending = nil
}

// DecodeEvents replaces the Data of events read from the store (in
// sequence order) by their JSON. fetch reads the stored data of event
// seq, for bases not among evs nor cached.
func (c *Bases) DecodeEvents(evs []Event, fetch func(seq int64) ([]byte, error)) error {
	need := map[int64]int{}
	any := false
	for _, e := range evs {
		if s := BaseSeq(e.Data); s != 0 {
			need[s]++
		}
		if Encoded(e.Data) {
			any = true
		}
	}
	if !any {
		return nil
	}
	have := map[int64]*CallBase{}
	for i := range evs {
		e := &evs[i]
		if !Encoded(e.Data) && need[e.Seq] == 0 {
			continue
		}
		var base *CallBase
		bs := BaseSeq(e.Data)
		if bs != 0 {
			if base = have[bs]; base == nil {
				var err error
				if base, err = c.resolve(bs, fetch); err != nil {
					return fmt.Errorf("event %d: %w", e.Seq, err)
				}
			}
			if need[bs]--; need[bs] <= 0 {
				delete(have, bs)
			}
		}
		data, self, err := decodeEvent(e.Data, base, need[e.Seq] > 0)
		if err != nil {
			return fmt.Errorf("event %d: %w", e.Seq, err)
		}
		e.Data = data
		if self != nil {
			self.Seq = e.Seq
			have[e.Seq] = self
		}
	}
	return nil
}

// resolve returns the base of event seq from the cache or the store,
// decoding the chain of bases it was stored against.
func (c *Bases) resolve(seq int64, fetch func(seq int64) ([]byte, error)) (*CallBase, error) {
	type link struct {
		seq    int64
		stored []byte
	}
	var chain []link
	var base *CallBase
	for s := seq; s != 0; {
		if base = c.Get(s); base != nil {
			break
		}
		stored, err := fetch(s)
		if err != nil {
			return nil, fmt.Errorf("read base event %d: %w", s, err)
		}
		chain = append(chain, link{s, stored})
		next := BaseSeq(stored)
		if next >= s {
			return nil, fmt.Errorf("%w: event %d names base %d", errCorrupt, s, next)
		}
		s = next
	}
	for i := len(chain) - 1; i >= 0; i-- {
		_, self, err := decodeEvent(chain[i].stored, base, true)
		if err != nil {
			return nil, fmt.Errorf("base event %d: %w", chain[i].seq, err)
		}
		if self == nil {
			return nil, fmt.Errorf("%w: base event %d is not an object", errCorrupt, chain[i].seq)
		}
		self.Seq = chain[i].seq
		base = self
	}
	c.put(nil, base)
	return base, nil
}

package model

import (
	"fmt"
	"sync"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph DSL
	"github.com/gomlx/gomlx/core/tensors"
)

// KV cache layout: per layer one key and one value tensor shaped
// [batch slots, kv heads, cache length S, head dim]. S grows by doubling.
//
// Invariant: every cache position not yet written by the slot's current
// sequence is zero. Prefill rewrites its whole row (prompt, then zeros), so
// decode can add each new key/value with a cheap ScatterSum instead of
// rewriting the cache.

// genExecs are the compiled generation graphs of a Model.
type genExecs struct {
	once                                 sync.Once
	err                                  error
	prefill, extend, decode, grow, clear *Exec
}

func (m *Model) gen() (*genExecs, error) {
	ge := &m.genExecs
	ge.once.Do(func() { ge.err = m.compileGen() })
	return ge, ge.err
}

func (m *Model) compileGen() error {
	cfg := m.cfg
	n, nl := len(cfg.Params()), cfg.NumHiddenLayers
	ge := &m.genExecs
	var err error
	// prefill(params, kc[nl], vc[nl], tokens [P, L], rows [P], nValid [P])
	// -> logits [P, V] of each prompt's last token, kc', vc'. Prompt p is
	// written to cache slot rows[p] (rows[p] < 0: padding, not written),
	// rewriting the whole slot: its keys/values at positions 0..nValid-1,
	// zeros after.
	ge.prefill, err = NewExec(m.backend, func(g *Graph, ins []*Node) []*Node {
		params, kc, vc := ins[:n], ins[n:n+nl], ins[n+nl:n+2*nl]
		tokens, rows, nValid := ins[n+2*nl], ins[n+2*nl+1], ins[n+2*nl+2]
		p, l := tokens.Shape().Dim(0), tokens.Shape().Dim(1)
		newK, newV := make([]*Node, nl), make([]*Node, nl)
		positions := Iota(g, shapes.Make(dtypes.Int32, p, l), 1)
		b, sLen := kc[0].Shape().Dim(0), kc[0].Shape().Dim(2)
		kvh, hd := cfg.NumKeyValueHeads, cfg.HeadDim
		full := []int{b, kvh, sLen, hd}
		// src[b] = the prompt written to slot b, or p (a zero row) if none.
		match := Equal(BroadcastToDims(Reshape(rows, 1, p), b, p), Iota(g, shapes.Make(dtypes.Int32, b, p), 0)) // [B, P]
		matchF := ConvertDType(match, dtypes.Float32)
		hit := GreaterThan(ReduceSum(matchF, 1), ZerosLike(ReduceSum(matchF, 1))) // [B]
		pIdx := ConvertDType(Iota(g, shapes.Make(dtypes.Int32, b, p), 1), dtypes.Float32)
		src := ConvertDType(ReduceSum(Mul(matchF, pIdx), 1), dtypes.Int32)
		src = Where(hit, src, BroadcastToDims(Const(g, int32(p)), b))
		write := BroadcastToDims(Reshape(hit, b, 1, 1, 1), full...)
		valid := ConvertDType(LessThan(Iota(g, shapes.Make(dtypes.Int32, p, 1, l, 1), 2), Reshape(nValid, p, 1, 1, 1)), dtypes.Float32)
		valid = BroadcastToDims(valid, p, kvh, l, hd)
		place := func(cache, x *Node) *Node { // x [P, L, KV, hd]
			x = Mul(headsFirst(x), valid)
			if sLen > l {
				x = Concatenate([]*Node{x, Zeros(g, shapes.Make(dtypes.Float32, p, kvh, sLen-l, hd))}, 2)
			}
			x = Concatenate([]*Node{x, Zeros(g, shapes.Make(dtypes.Float32, 1, kvh, sLen, hd))}, 0) // row p: zeros
			return Where(write, Gather(x, Reshape(src, b, 1)), cache)
		}
		h := newNet(cfg, params).decoder(tokens, positions, func(i int, k, v *Node) (*Node, *Node, *Node) {
			newK[i] = place(kc[i], k)
			newV[i] = place(vc[i], v)
			return causalKV(k, v)
		})
		last := Max(Sub(nValid, OnesLike(nValid)), ZerosLike(nValid))
		sel := OneHot(last, l, dtypes.Float32) // [P, L]
		logits := newNet(cfg, params).logits(Einsum("pl,pld->pd", sel, h))
		return append(append([]*Node{logits}, newK...), newV...)
	})
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	// decode(params, kc, vc, tokens [B, 1], pos [B]) -> logits [B, V], kc', vc'.
	// Slots with pos < 0 are idle: their cache is left unchanged.
	ge.decode, err = NewExec(m.backend, func(g *Graph, ins []*Node) []*Node {
		params, kc, vc := ins[:n], ins[n:n+nl], ins[n+nl:n+2*nl]
		tokens, pos := ins[n+2*nl], ins[n+2*nl+1]
		b := tokens.Shape().Dim(0)
		s := kc[0].Shape().Dim(2)
		kvh, hd := cfg.NumKeyValueHeads, cfg.HeadDim
		live := GreaterOrEqual(pos, ZerosLike(pos))
		pos = Max(pos, ZerosLike(pos))
		// Scatter indices (slot, kv head, position) for each of B*KV rows.
		idx := Concatenate([]*Node{
			Iota(g, shapes.Make(dtypes.Int32, b, kvh, 1), 0),
			Iota(g, shapes.Make(dtypes.Int32, b, kvh, 1), 1),
			BroadcastToDims(Reshape(pos, b, 1, 1), b, kvh, 1),
		}, 2)
		idx = Reshape(idx, b*kvh, 3)
		liveF := BroadcastToDims(Reshape(ConvertDType(live, dtypes.Float32), b, 1, 1), b, kvh, hd)
		write := func(cache, x *Node) *Node { // x [B, 1, KV, hd]
			upd := Mul(Reshape(x, b, kvh, hd), liveF)
			return ScatterSum(cache, idx, Reshape(upd, b*kvh, hd), true, true)
		}
		cols := Iota(g, shapes.Make(dtypes.Int32, b, 1, s), 2)
		mask := LessOrEqual(cols, BroadcastToDims(Reshape(pos, b, 1, 1), b, 1, s))
		newK, newV := make([]*Node, nl), make([]*Node, nl)
		h := newNet(cfg, params).decoder(tokens, Reshape(pos, b, 1), func(i int, k, v *Node) (*Node, *Node, *Node) {
			newK[i] = write(kc[i], k)
			newV[i] = write(vc[i], v)
			return newK[i], newV[i], mask
		})
		logits := Reshape(newNet(cfg, params).logits(h), b, cfg.VocabSize)
		return append(append([]*Node{logits}, newK...), newV...)
	})
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	// extend(params, kc, vc, tokens [P, L], rows [P], start [P], nValid [P],
	// span [W]) -> logits [P, V] of each chunk's last valid token, kc', vc'.
	// Chunk p continues the sequence of cache slot rows[p] at positions
	// start[p]..: its first nValid[p] keys/values are added there (those
	// positions are zero, see the invariant) and it attends to the slot's
	// positions up to its own, all below W (read from span's shape). A long
	// prompt is prefilled as a first chunk (prefill) and then such chunks,
	// so attention scores stay [chunk, W] in size.
	ge.extend, err = NewExec(m.backend, func(g *Graph, ins []*Node) []*Node {
		params, kc, vc := ins[:n], ins[n:n+nl], ins[n+nl:n+2*nl]
		tokens, rows, start, nValid := ins[n+2*nl], ins[n+2*nl+1], ins[n+2*nl+2], ins[n+2*nl+3]
		span := ins[n+2*nl+4].Shape().Dim(0)
		p, l := tokens.Shape().Dim(0), tokens.Shape().Dim(1)
		s := kc[0].Shape().Dim(2)
		kvh, hd := cfg.NumKeyValueHeads, cfg.HeadDim
		offs := Iota(g, shapes.Make(dtypes.Int32, p, l), 1)
		positions := Add(offs, BroadcastToDims(Reshape(start, p, 1), p, l)) // [P, L]
		valid := LessThan(offs, BroadcastToDims(Reshape(nValid, p, 1), p, l))
		clamped := Min(positions, BroadcastToDims(Const(g, int32(s-1)), p, l))
		idx := Concatenate([]*Node{
			BroadcastToDims(Reshape(rows, p, 1, 1, 1), p, kvh, l, 1),
			Iota(g, shapes.Make(dtypes.Int32, p, kvh, l, 1), 1),
			BroadcastToDims(Reshape(clamped, p, 1, l, 1), p, kvh, l, 1),
		}, 3)
		idx = Reshape(idx, p*kvh*l, 3)
		validF := BroadcastToDims(Reshape(ConvertDType(valid, dtypes.Float32), p, 1, l, 1), p, kvh, l, hd)
		write := func(cache, x *Node) *Node { // x [P, L, KV, hd]
			upd := Mul(headsFirst(x), validF)
			return ScatterSum(cache, idx, Reshape(upd, p*kvh*l, hd), false, false)
		}
		cols := Iota(g, shapes.Make(dtypes.Int32, p, l, span), 2)
		mask := LessOrEqual(cols, BroadcastToDims(Reshape(positions, p, l, 1), p, l, span))
		newK, newV := make([]*Node, nl), make([]*Node, nl)
		sel := Reshape(rows, p, 1)
		h := newNet(cfg, params).decoder(tokens, positions, func(i int, k, v *Node) (*Node, *Node, *Node) {
			newK[i] = write(kc[i], k)
			newV[i] = write(vc[i], v)
			window := func(c *Node) *Node { return SliceAxis(Gather(c, sel), 2, AxisRange(0, span)) }
			return window(newK[i]), window(newV[i]), mask
		})
		last := Max(Sub(nValid, OnesLike(nValid)), ZerosLike(nValid))
		pick := OneHot(last, l, dtypes.Float32) // [P, L]
		logits := newNet(cfg, params).logits(Einsum("pl,pld->pd", pick, h))
		return append(append([]*Node{logits}, newK...), newV...)
	})
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	// grow(cache..., extra [E]) appends E zero positions to each cache (E
	// is read from the shape of the last argument).
	ge.grow, err = NewExec(m.backend, func(g *Graph, ins []*Node) []*Node {
		extra := ins[len(ins)-1].Shape().Dim(0)
		out := make([]*Node, len(ins)-1)
		for i, c := range ins[:len(ins)-1] {
			d := c.Shape().Dimensions
			out[i] = Concatenate([]*Node{c, Zeros(g, shapes.Make(c.DType(), d[0], d[1], extra, d[3]))}, 2)
		}
		return out
	})
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	for _, e := range []*Exec{ge.prefill, ge.extend, ge.decode, ge.grow} {
		e.SetMaxCache(4096) // prompt-length × batch × cache-length buckets
	}
	return nil
}

// kvCache is one batch's cache on the backend.
type kvCache struct {
	k, v  []*tensors.Tensor
	slots int
	len   int
	max   int // the length it may grow to
}

// newCache makes a cache of length positions per slot that may grow to
// maxLen (at least length).
func (m *Model) newCache(slots, length, maxLen int) *kvCache {
	length = min(length, maxLen)
	c := &kvCache{slots: slots, len: length, max: maxLen}
	for range m.cfg.NumHiddenLayers {
		sh := shapes.Make(dtypes.Float32, slots, m.cfg.NumKeyValueHeads, length, m.cfg.HeadDim)
		c.k = append(c.k, tensors.FromShape(sh))
		c.v = append(c.v, tensors.FromShape(sh))
	}
	return c
}

func (c *kvCache) args() []any {
	a := make([]any, 0, 2*len(c.k))
	for _, t := range c.k {
		a = append(a, t)
	}
	for _, t := range c.v {
		a = append(a, t)
	}
	return a
}

// replace installs new cache tensors (the outputs after the logits) and
// frees the old ones.
func (c *kvCache) replace(outs []*tensors.Tensor) {
	nl := len(c.k)
	for i := range nl {
		c.k[i].FinalizeAll()
		c.v[i].FinalizeAll()
		c.k[i], c.v[i] = outs[i], outs[nl+i]
	}
	c.len = outs[0].Shape().Dim(2)
}

func (c *kvCache) free() {
	for i := range c.k {
		c.k[i].FinalizeAll()
		c.v[i].FinalizeAll()
	}
}

// growTo doubles the cache (up to its maximum) until it holds length
// positions.
func (m *Model) growTo(c *kvCache, length int) error {
	if length > c.max {
		return fmt.Errorf("model: %d positions exceed the KV cache's %d", length, c.max)
	}
	ge, err := m.gen()
	if err != nil {
		return err
	}
	if c.len >= length {
		return nil
	}
	next := c.len
	for next < length {
		next = min(2*next, c.max)
	}
	args := append(c.args(), tensors.FromShape(shapes.Make(dtypes.Int32, next-c.len)))
	outs, err := ge.grow.Call(args...)
	if err != nil {
		return fmt.Errorf("model: grow cache: %w", err)
	}
	c.replace(outs)
	return nil
}

// prefillChunk is the longest piece of a prompt prefilled in one graph
// call: longer prompts continue in chunks (extend), so attention scores stay
// [chunk, cache] in size instead of [prompt, prompt].
const prefillChunk = 512

// prefill runs prompts into the given cache slots and returns each
// prompt's last-token logits.
func (m *Model) prefill(w *DeviceWeights, c *kvCache, rows []int, prompts [][]int32) ([][]float32, error) {
	ge, err := m.gen()
	if err != nil {
		return nil, err
	}
	maxLen, first := 1, make([][]int32, len(prompts))
	for i, p := range prompts {
		maxLen = max(maxLen, len(p))
		first[i] = p[:min(len(p), prefillChunk)]
	}
	firstLen := min(maxLen, prefillChunk)
	l := bucket(firstLen)
	if err := m.growTo(c, max(l, maxLen)); err != nil {
		return nil, err
	}
	np := bucket(len(prompts))
	rowArg, lenArg := make([]int32, np), make([]int32, np)
	for i := range np {
		rowArg[i], lenArg[i] = -1, 1
		if i < len(prompts) {
			rowArg[i], lenArg[i] = int32(rows[i]), int32(len(first[i]))
		}
	}
	args := append(w.args(), c.args()...)
	args = append(args, tensors.FromFlatDataAndDimensions(padIDs(first, np, l), np, l),
		tensors.FromFlatDataAndDimensions(rowArg, np), tensors.FromFlatDataAndDimensions(lenArg, np))
	outs, err := ge.prefill.Call(args...)
	if err != nil {
		return nil, fmt.Errorf("model: prefill: %w", err)
	}
	logits, err := m.takeLogits(outs, c, len(prompts))
	if err != nil {
		return nil, err
	}
	for i, p := range prompts {
		for off := prefillChunk; off < len(p); off += prefillChunk {
			chunk := p[off:min(len(p), off+prefillChunk)]
			args := append(w.args(), c.args()...)
			args = append(args, tensors.FromFlatDataAndDimensions(padIDs([][]int32{chunk}, 1, prefillChunk), 1, prefillChunk),
				tensors.FromFlatDataAndDimensions([]int32{int32(rows[i])}, 1),
				tensors.FromFlatDataAndDimensions([]int32{int32(off)}, 1),
				tensors.FromFlatDataAndDimensions([]int32{int32(len(chunk))}, 1),
				tensors.FromShape(shapes.Make(dtypes.Int32, min(bucket(off+len(chunk)), c.len))))
			outs, err := ge.extend.Call(args...)
			if err != nil {
				return nil, fmt.Errorf("model: prefill: %w", err)
			}
			lg, err := m.takeLogits(outs, c, 1)
			if err != nil {
				return nil, err
			}
			logits[i] = lg[0]
		}
	}
	return logits, nil
}

// takeLogits copies the logits [≥n, V] (outs[0]) of a prefill or extend
// call and installs its new cache tensors (the rest).
func (m *Model) takeLogits(outs []*tensors.Tensor, c *kvCache, n int) ([][]float32, error) {
	flat, err := tensors.CopyFlatData[float32](outs[0])
	outs[0].FinalizeAll()
	c.replace(outs[1:])
	if err != nil {
		return nil, err
	}
	v := m.cfg.VocabSize
	logits := make([][]float32, n)
	for i := range logits {
		logits[i] = flat[i*v : (i+1)*v]
	}
	return logits, nil
}

// decode feeds one token per slot at the given positions and returns the
// logits [slots][V].
func (m *Model) decode(w *DeviceWeights, c *kvCache, tokens, pos []int32) ([]float32, error) {
	ge, err := m.gen()
	if err != nil {
		return nil, err
	}
	maxPos := 0
	for _, p := range pos {
		maxPos = max(maxPos, int(p))
	}
	if err := m.growTo(c, maxPos+1); err != nil {
		return nil, err
	}
	args := append(w.args(), c.args()...)
	args = append(args, tensors.FromFlatDataAndDimensions(append([]int32(nil), tokens...), len(tokens), 1),
		tensors.FromFlatDataAndDimensions(append([]int32(nil), pos...), len(pos)))
	outs, err := ge.decode.Call(args...)
	if err != nil {
		return nil, fmt.Errorf("model: decode: %w", err)
	}
	logits, err := tensors.CopyFlatData[float32](outs[0])
	outs[0].FinalizeAll()
	if err != nil {
		return nil, err
	}
	c.replace(outs[1:])
	return logits, nil
}

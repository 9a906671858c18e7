package model

import (
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // graph DSL
)

// net is the model's graph-building code for one graph: the weight nodes
// by name plus the configuration.
type net struct {
	cfg Config
	p   map[string]*Node
	// grad is set on graphs that are differentiated (training): their
	// matrix products carry written-out gradients (see matmul), whose
	// identity nodes would only cost copies in inference graphs.
	grad bool
}

// newTrainNet is newNet for graphs that take gradients of the weights.
func newTrainNet(cfg Config, params []*Node) *net {
	n := newNet(cfg, params)
	n.grad = true
	return n
}

func newNet(cfg Config, params []*Node) *net {
	n := &net{cfg: cfg, p: make(map[string]*Node, len(params))}
	for i, spec := range cfg.Params() {
		n.p[spec.Name] = params[i]
	}
	if cfg.TieWordEmbeddings {
		n.p["lm_head.weight"] = n.p["model.embed_tokens.weight"]
	}
	return n
}

func (n *net) w(name string) *Node {
	x, ok := n.p[name]
	if !ok {
		panic(fmt.Errorf("model: no parameter %s", name))
	}
	return x
}

// rmsNorm normalizes over the last axis and scales by weight.
func rmsNorm(x, weight *Node, eps float64) *Node {
	ms := ReduceAndKeep(Square(x), ReduceMean, -1)
	r := BroadcastToDims(Div(ScalarOne(x.Graph(), x.DType()), Sqrt(AddScalar(ms, eps))), x.Shape().Dimensions...)
	return Mul(Mul(x, r), like(weight, x))
}

// like broadcasts v (whose dims are x's trailing or size-1 dims) to x's shape.
func like(v, x *Node) *Node {
	if v.Rank() < x.Rank() {
		v = ExpandLeftToRank(v, x.Rank())
	}
	return BroadcastToDims(v, x.Shape().Dimensions...)
}

// linear applies y = x·W (+ b) over x's last axis, with W in the device
// layout [in, out] (see deviceLayout).
func (n *net) linear(x, w, b *Node) *Node {
	y := n.matmul(x, w, false)
	if b != nil {
		y = Add(y, like(b, y))
	}
	return y
}

// rope rotates x [B, L, heads, hd] by positions [B, L] (Hugging Face
// "rotate half" convention) with the inverse frequencies invFreq
// (Config.ropeInvFreq), scaling cos and sin by attention.
func rope(x, positions *Node, invFreq []float64, attention float64) *Node {
	g := x.Graph()
	hd := x.Shape().Dim(-1)
	half := hd / 2
	inv := make([]float32, half)
	for i := range inv {
		inv[i] = float32(invFreq[i])
	}
	pos := ConvertDType(positions, dtypes.Float32) // [B, L]
	b0, l0 := pos.Shape().Dim(0), pos.Shape().Dim(1)
	freqs := Mul(BroadcastToDims(ExpandAxes(pos, -1), b0, l0, half),
		BroadcastToDims(Reshape(Const(g, inv), 1, 1, half), b0, l0, half)) // [B, L, half]
	emb := Concatenate([]*Node{freqs, freqs}, -1)                // [B, L, hd]
	cos, sin := ExpandAxes(Cos(emb), 2), ExpandAxes(Sin(emb), 2) // [B, L, 1, hd]
	x1, x2 := SliceAxis(x, -1, AxisRange(0, half)), SliceAxis(x, -1, AxisRange(half))
	rot := Concatenate([]*Node{Neg(x2), x1}, -1)
	b, l, h := x.Shape().Dim(0), x.Shape().Dim(1), x.Shape().Dim(2)
	if attention != 1 {
		cos, sin = MulScalar(cos, attention), MulScalar(sin, attention)
	}
	cos = BroadcastToDims(cos, b, l, h, hd)
	sin = BroadcastToDims(sin, b, l, h, hd)
	return Add(Mul(x, cos), Mul(rot, sin))
}

// attention computes grouped-query attention of q [B, L, H, hd] over keys
// and values [B, KV, S, hd]; mask [B, L, S] says which keys each query
// sees. It returns [B, L, H*hd].
func (n *net) attention(q, k, v, mask *Node, kvHeads int) *Node {
	b, l, h, hd := q.Shape().Dim(0), q.Shape().Dim(1), q.Shape().Dim(2), q.Shape().Dim(3)
	s := k.Shape().Dim(2)
	grp := h / kvHeads
	q = Reshape(q, b, l, kvHeads, grp, hd)
	q = TransposeAllAxes(q, 0, 2, 3, 1, 4) // [B, KV, G, L, hd]
	q = Reshape(MulScalar(q, 1/math.Sqrt(float64(hd))), b, kvHeads, grp*l, hd)
	var scores *Node // [B, KV, G*L, S]
	if n.grad {
		scores = Reshape(batchMatmulWithGradient(Reshape(q, b*kvHeads, grp*l, hd), Reshape(k, b*kvHeads, s, hd), true), b, kvHeads, grp*l, s)
	} else {
		scores = Einsum("bkmd,bksd->bkms", q, k)
	}
	m := Reshape(BroadcastToDims(Reshape(mask, b, 1, 1, l, s), b, kvHeads, grp, l, s), b, kvHeads, grp*l, s)
	scores = Where(m, scores, BroadcastToDims(Const(q.Graph(), float32(-1e30)), b, kvHeads, grp*l, s))
	probs := softmax(scores)
	var out *Node // [B, KV, G*L, hd]
	if n.grad {
		out = batchMatmulWithGradient(Reshape(probs, b*kvHeads, grp*l, s), Reshape(v, b*kvHeads, s, hd), false)
	} else {
		out = Einsum("bkms,bksd->bkmd", probs, v)
	}
	out = TransposeAllAxes(Reshape(out, b, kvHeads, grp, l, hd), 0, 3, 1, 2, 4)
	return Reshape(out, b, l, h*hd)
}

// headsFirst turns [B, L, KV, hd] into [B, KV, L, hd].
func headsFirst(x *Node) *Node { return TransposeAllAxes(x, 0, 2, 1, 3) }

// kvFunc lets the caller combine a layer's new keys/values [B, L, KV, hd]
// with a cache; it returns the keys/values to attend over ([B, KV, S, hd])
// and the mask [B, L, S].
type kvFunc func(layer int, k, v *Node) (keys, values, mask *Node)

// decoder runs the transformer over ids [B, L] at positions [B, L] and
// returns the final normalized hidden states [B, L, D].
func (n *net) decoder(ids, positions *Node, kv kvFunc) *Node {
	c := n.cfg
	b, l := ids.Shape().Dim(0), ids.Shape().Dim(1)
	x := Gather(n.w("model.embed_tokens.weight"), ExpandAxes(ids, -1)) // [B, L, D]
	eps := c.RMSNormEps
	hd := c.HeadDim
	invFreq, ropeScale := c.ropeInvFreq()
	for i := range c.NumHiddenLayers {
		pre := fmt.Sprintf("model.layers.%d.", i)
		h := rmsNorm(x, n.w(pre+"input_layernorm.weight"), eps)
		var qb, kb, vb, ob *Node
		if c.QKVBias() {
			qb, kb, vb = n.w(pre+"self_attn.q_proj.bias"), n.w(pre+"self_attn.k_proj.bias"), n.w(pre+"self_attn.v_proj.bias")
		}
		if c.OBias() {
			ob = n.w(pre + "self_attn.o_proj.bias")
		}
		q := Reshape(n.linear(h, n.w(pre+"self_attn.q_proj.weight"), qb), b, l, c.NumAttentionHeads, hd)
		k := Reshape(n.linear(h, n.w(pre+"self_attn.k_proj.weight"), kb), b, l, c.NumKeyValueHeads, hd)
		v := Reshape(n.linear(h, n.w(pre+"self_attn.v_proj.weight"), vb), b, l, c.NumKeyValueHeads, hd)
		if c.QKNorm() {
			q = rmsNorm(q, n.w(pre+"self_attn.q_norm.weight"), eps)
			k = rmsNorm(k, n.w(pre+"self_attn.k_norm.weight"), eps)
		}
		q = rope(q, positions, invFreq, ropeScale)
		k = rope(k, positions, invFreq, ropeScale)
		keys, values, mask := kv(i, k, v)
		a := n.attention(q, keys, values, mask, c.NumKeyValueHeads)
		x = Add(x, n.linear(a, n.w(pre+"self_attn.o_proj.weight"), ob))
		h = rmsNorm(x, n.w(pre+"post_attention_layernorm.weight"), eps)
		var gb, ub, db *Node
		if c.MLPBiased() {
			gb, ub, db = n.w(pre+"mlp.gate_proj.bias"), n.w(pre+"mlp.up_proj.bias"), n.w(pre+"mlp.down_proj.bias")
		}
		gate := n.linear(h, n.w(pre+"mlp.gate_proj.weight"), gb)
		up := n.linear(h, n.w(pre+"mlp.up_proj.weight"), ub)
		x = Add(x, n.linear(Mul(silu(gate), up), n.w(pre+"mlp.down_proj.weight"), db))
	}
	return rmsNorm(x, n.w("model.norm.weight"), eps)
}

// logits projects hidden states to the vocabulary.
func (n *net) logits(h *Node) *Node {
	if n.cfg.TieWordEmbeddings { // the embeddings stay [V, D]
		return n.matmul(h, n.w("lm_head.weight"), true)
	}
	return n.linear(h, n.w("lm_head.weight"), nil)
}

// causalKV is the kvFunc of a full-sequence (no cache) forward pass.
func causalKV(k, v *Node) (*Node, *Node, *Node) {
	g := k.Graph()
	b, l := k.Shape().Dim(0), k.Shape().Dim(1)
	rows := Iota(g, shapes.Make(dtypes.Int32, b, l, l), 1)
	cols := Iota(g, shapes.Make(dtypes.Int32, b, l, l), 2)
	return headsFirst(k), headsFirst(v), GreaterOrEqual(rows, cols)
}

// tokenLogProbs runs a teacher-forced pass over ids [B, T] and returns
// logp [B, T] with logp[:, t] = log p(ids[t] | ids[:t]) (0 at t = 0) and the
// entropy [B, T] of the distribution that predicted token t (0 at t = 0).
func (n *net) tokenLogProbs(ids *Node) (logp, entropy *Node) {
	g := ids.Graph()
	b, t := ids.Shape().Dim(0), ids.Shape().Dim(1)
	positions := Iota(g, shapes.Make(dtypes.Int32, b, t), 1)
	h := n.decoder(ids, positions, func(_ int, k, v *Node) (*Node, *Node, *Node) { return causalKV(k, v) })
	h = SliceAxis(h, 1, AxisRange(0, t-1)) // predictions for tokens 1..T-1
	v := n.cfg.VocabSize
	logits := Reshape(n.logits(h), b*(t-1), v)
	targets := Reshape(SliceAxis(ids, 1, AxisRange(1)), b*(t-1))
	lp, ent := targetLogProbs(logits, targets)
	lp, ent = Reshape(lp, b, t-1), Reshape(ent, b, t-1)
	zero := Zeros(g, shapes.Make(dtypes.Float32, b, 1))
	return Concatenate([]*Node{zero, lp}, 1), Concatenate([]*Node{zero, ent}, 1)
}

// targetLogProbs returns log softmax(logits)[target] and the entropy of
// softmax(logits) for logits z [N, V] and targets [N]. It makes one pass of
// the backend's fused softmax (its float32 exp is much faster than Exp/Log)
// and one multiply-reduce over the vocabulary, with no max reduction:
//
//	p = softmax(z), s = Σ p (in float64), log p_t = log p[t] − log s
//	log Z = z[t] − log p_t, H = log Z − Σ p·z / s
//
// The fused softmax sums its normaliser in float32, off by up to ~4e-4 in
// log at a 152k vocabulary; s, summed in float64, measures that error
// (it is 1 but for rounding), so the log-probs are as accurate as the
// engine's float64 log-softmax. s carries no gradient (mathematically it is
// constant).
//
// p[t] is floored at 1e-37: a target below that (log-prob < −85, never
// sampled in practice) reports −85, gets no gradient, and makes H
// inexact.
func targetLogProbs(logits, targets *Node) (logp, entropy *Node) {
	g := logits.Graph()
	nRows := logits.Shape().Dim(0)
	p := softmax(logits)
	idx := Concatenate([]*Node{Iota(g, shapes.Make(dtypes.Int32, nRows, 1), 0), Reshape(ConvertDType(targets, dtypes.Int32), nRows, 1)}, 1)
	pt := Gather(p, idx)      // [N]
	zt := Gather(logits, idx) // [N]
	s := StopGradient(ReduceSum(ConvertDType(p, dtypes.Float64), -1))
	logS := ConvertDType(Log(s), dtypes.Float32)
	logp = Sub(Log(Max(pt, BroadcastToDims(Const(g, float32(1e-37)), nRows))), logS)
	logZ := Sub(zt, logp)
	pz := ReduceSum(ConvertDType(Mul(p, logits), dtypes.Float64), -1)
	entropy = Sub(logZ, ConvertDType(Div(pz, s), dtypes.Float32))
	return logp, entropy
}

// The Go backend's Exp and Logistic call math.Exp per element, whose
// assembly runs about 100x slower in a GOEXPERIMENT=simd build (seen here:
// 2.9 µs per element against 24 ns without simd; it was 55% of a training
// step's CPU time at the 10m preset). The model's graphs therefore avoid
// both: softmax runs the backend's fused softmax (its own float32 exp) with
// a hand-written gradient, and silu uses Expm1 (math.Expm1 is plain Go).

// softmax is the fused softmax over the last axis with its gradient
// p·(v − Σ v·p) written out. GoMLX's Softmax differentiates through the
// decomposed softmax instead, recomputing exp with the backend's Exp.
func softmax(x *Node) *Node {
	p := Softmax(x, -1)
	return withGradient(x, p, func(v *Node) *Node {
		return Mul(p, Sub(v, ReduceAndKeep(Mul(v, p), ReduceSum, -1)))
	})
}

// silu is x·sigmoid(x), with sigmoid(x) = 1/(2 + expm1(−x)) and the
// gradient s·(1 + x·(1 − s)) written out (Expm1 has no gradient in GoMLX).
func silu(x *Node) *Node {
	s := Reciprocal(AddScalar(Expm1(Neg(x)), 2))
	return withGradient(x, Mul(x, s), func(v *Node) *Node {
		return Mul(v, Mul(s, OnePlus(Mul(x, OneMinus(s)))))
	})
}

// withGradient returns y, the value of a function f at x, with its own
// gradient cut and replaced by f's vector-Jacobian product vjp (from v, the
// gradient with respect to y, to the gradient with respect to x): it adds
// x − x, exactly 0 for finite x, through an identity whose gradient is vjp.
func withGradient(x, y *Node, vjp func(v *Node) *Node) *Node {
	xi := IdentityWithCustomGradient(x, func(_, v *Node) *Node { return vjp(v) })
	return Add(StopGradient(y), Sub(xi, StopGradient(xi)))
}

// matmul returns x·W over x's last axis for W [K, M], or x·Wᵀ for W [M, K]
// when wT; on differentiated graphs (n.grad) with its gradient written out
// (matmulWithGradient).
func (n *net) matmul(x, w *Node, wT bool) *Node {
	if n.grad {
		return matmulWithGradient(x, w, wT)
	}
	kAxis := 0
	if wT {
		kAxis = 1
	}
	return DotGeneral(x, []int{x.Rank() - 1}, nil, w, []int{kAxis}, nil)
}

// matmulWithGradient is matmul with its gradient written out. GoMLX
// differentiates DotGeneral into DotGenerals followed by transposes back to
// the operands' axis order (identity permutations included), and the Go
// backend copies every transpose element by element and transposes again
// inside DotGeneral when an operand's contracting axis is not where its
// kernels want it (last for the left operand). Here
//
//	dx = v·Wᵀ (v·W for wT): the left operand v contracts its last axis,
//	     W either its first or its last; no transpose;
//	dW = xᵀ·v or (vᵀ·x)ᵀ, over the N = prod(x.dims[:-1]) rows: one explicit
//	     transpose of x [N, K] or of v [N, M] (whichever, with the [K, M]
//	     transpose the orientation may need, moves fewer elements).
//
// y's own VJP runs first (it is downstream of both operands) and hands v
// to the operands' VJPs; GoMLX's DotGeneral VJP, built but unused, is
// dropped by the backend's dead-code elimination.
func matmulWithGradient(x, w *Node, wT bool) *Node {
	k := x.Shape().Dim(-1)
	return productWithGradient(x, w, wT, false, x.Shape().Size()/k, k)
}

// batchMatmulWithGradient is matmulWithGradient over a leading batch axis:
// x [B, N, K] times w [B, K, M] (or w [B, M, K] when wT) is [B, N, M].
func batchMatmulWithGradient(x, w *Node, wT bool) *Node {
	return productWithGradient(x, w, wT, true, x.Shape().Dim(1), x.Shape().Dim(2))
}

// productWithGradient implements matmulWithGradient (batched: x and w have
// a leading batch axis) for x's n rows of k.
func productWithGradient(x, w *Node, wT, batched bool, n, k int) *Node {
	var batch []int // the batch axis of every product
	b := 0
	if batched {
		batch, b = []int{0}, 1
	}
	mAxis, kAxis := b+1, b // w's axes
	if wT {
		mAxis, kAxis = b, b+1
	}
	m := w.Shape().Dim(mAxis)
	// rows views a [.., N, C] operand as [N, C] (unbatched; batched ones
	// already are [B, N, C]); tr transposes the last two axes.
	rows := func(a *Node, c int) *Node {
		if batched {
			return a
		}
		return Reshape(a, n, c)
	}
	tr := func(a *Node) *Node { return Transpose(a, b, b+1) }
	var v *Node // ∂loss/∂y, set by y's VJP
	grad := func() *Node {
		if v == nil {
			panic("model: matrix product operand differentiated before the product")
		}
		return v
	}
	xi := IdentityWithCustomGradient(x, func(_, _ *Node) *Node {
		v := grad()
		return DotGeneral(v, []int{v.Rank() - 1}, batch, w, []int{mAxis}, batch)
	})
	wi := IdentityWithCustomGradient(w, func(_, _ *Node) *Node {
		x2, v2 := rows(x, k), rows(grad(), m)
		// [K, M] from xᵀ·v costs an N×K transpose; [M, K] from vᵀ·x an N×M
		// one; the orientation w lacks costs a further K×M transpose.
		costKM, costMK := n*k, n*m
		if wT {
			costKM += k * m
		} else {
			costMK += k * m
		}
		var g *Node
		if costKM <= costMK {
			g = DotGeneral(tr(x2), []int{b + 1}, batch, v2, []int{b}, batch) // [K, M]
			if wT {
				g = tr(g)
			}
		} else {
			g = DotGeneral(tr(v2), []int{b + 1}, batch, x2, []int{b}, batch) // [M, K]
			if !wT {
				g = tr(g)
			}
		}
		return g
	})
	y := DotGeneral(xi, []int{x.Rank() - 1}, batch, wi, []int{kAxis}, batch)
	return IdentityWithCustomGradient(y, func(_, g *Node) *Node {
		v = g
		return g
	})
}

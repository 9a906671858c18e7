package model

import (
	"fmt"
	"math"
)

// referenceLogProbs is a naive float64 host implementation of the
// architecture, written straight from the Hugging Face modeling code
// (Qwen2/Qwen3/Llama), to check the GoMLX graphs.
func referenceLogProbs(w *Weights, ids []int32) (logp, entropy []float32) {
	c := w.Config
	p := w.Named()
	get := func(name string) []float32 { return p[name].Data }
	D, hd, H, KV := c.HiddenSize, c.HeadDim, c.NumAttentionHeads, c.NumKeyValueHeads
	T := len(ids)
	lin := func(x []float64, wt []float32, b []float32, out, in int) []float64 {
		y := make([]float64, out)
		for o := range out {
			s := 0.0
			for i := range in {
				s += x[i] * float64(wt[o*in+i])
			}
			if b != nil {
				s += float64(b[o])
			}
			y[o] = s
		}
		return y
	}
	rms := func(x []float64, wt []float32) []float64 {
		ms := 0.0
		for _, v := range x {
			ms += v * v
		}
		r := 1 / math.Sqrt(ms/float64(len(x))+c.RMSNormEps)
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = v * r * float64(wt[i])
		}
		return y
	}
	invFreq, ropeScale := c.ropeInvFreq()
	rope := func(x []float64, pos int) []float64 {
		y := make([]float64, hd)
		half := hd / 2
		for i := range half {
			f := float64(pos) * invFreq[i]
			cs, sn := ropeScale*math.Cos(f), ropeScale*math.Sin(f)
			y[i] = x[i]*cs - x[i+half]*sn
			y[i+half] = x[i+half]*cs + x[i]*sn
		}
		return y
	}
	emb := get("model.embed_tokens.weight")
	x := make([][]float64, T)
	for t, id := range ids {
		x[t] = make([]float64, D)
		for i := range D {
			x[t][i] = float64(emb[int(id)*D+i])
		}
	}
	var nilb []float32
	for l := range c.NumHiddenLayers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		bias := func(n string) []float32 {
			if t, ok := p[pre+n]; ok {
				return t.Data
			}
			return nilb
		}
		qs := make([][][]float64, T)
		ks := make([][][]float64, T)
		vs := make([][][]float64, T)
		for t := range T {
			h := rms(x[t], get(pre+"input_layernorm.weight"))
			q := lin(h, get(pre+"self_attn.q_proj.weight"), bias("self_attn.q_proj.bias"), H*hd, D)
			k := lin(h, get(pre+"self_attn.k_proj.weight"), bias("self_attn.k_proj.bias"), KV*hd, D)
			v := lin(h, get(pre+"self_attn.v_proj.weight"), bias("self_attn.v_proj.bias"), KV*hd, D)
			for hh := range H {
				qh := q[hh*hd : (hh+1)*hd]
				if c.QKNorm() {
					qh = rms(qh, get(pre+"self_attn.q_norm.weight"))
				}
				qs[t] = append(qs[t], rope(qh, t))
			}
			for hh := range KV {
				kh := k[hh*hd : (hh+1)*hd]
				if c.QKNorm() {
					kh = rms(kh, get(pre+"self_attn.k_norm.weight"))
				}
				ks[t] = append(ks[t], rope(kh, t))
				vs[t] = append(vs[t], v[hh*hd:(hh+1)*hd])
			}
		}
		for t := range T {
			att := make([]float64, 0, H*hd)
			for hh := range H {
				kvh := hh / (H / KV)
				sc := make([]float64, t+1)
				mx := math.Inf(-1)
				for s := 0; s <= t; s++ {
					for i := range hd {
						sc[s] += qs[t][hh][i] * ks[s][kvh][i]
					}
					sc[s] /= math.Sqrt(float64(hd))
					mx = math.Max(mx, sc[s])
				}
				z := 0.0
				for s := range sc {
					sc[s] = math.Exp(sc[s] - mx)
					z += sc[s]
				}
				o := make([]float64, hd)
				for s := range sc {
					for i := range hd {
						o[i] += sc[s] / z * vs[s][kvh][i]
					}
				}
				att = append(att, o...)
			}
			ao := lin(att, get(pre+"self_attn.o_proj.weight"), bias("self_attn.o_proj.bias"), D, H*hd)
			for i := range D {
				x[t][i] += ao[i]
			}
			h := rms(x[t], get(pre+"post_attention_layernorm.weight"))
			I := c.IntermediateSize
			g := lin(h, get(pre+"mlp.gate_proj.weight"), bias("mlp.gate_proj.bias"), I, D)
			u := lin(h, get(pre+"mlp.up_proj.weight"), bias("mlp.up_proj.bias"), I, D)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			dn := lin(g, get(pre+"mlp.down_proj.weight"), bias("mlp.down_proj.bias"), D, I)
			for i := range D {
				x[t][i] += dn[i]
			}
		}
	}
	head := "lm_head.weight"
	if _, ok := p[head]; !ok {
		head = "model.embed_tokens.weight"
	}
	logp = make([]float32, T)
	entropy = make([]float32, T)
	for t := 1; t < T; t++ {
		h := rms(x[t-1], get("model.norm.weight"))
		lg := lin(h, get(head), nil, c.VocabSize, D)
		lp := logSoftmax64(lg)
		logp[t] = float32(lp[ids[t]])
		e := 0.0
		for _, v := range lp {
			e -= math.Exp(v) * v
		}
		entropy[t] = float32(e)
	}
	return logp, entropy
}

func logSoftmax64(x []float64) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, v)
	}
	z := 0.0
	for _, v := range x {
		z += math.Exp(v - mx)
	}
	lz := mx + math.Log(z)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v - lz
	}
	return out
}

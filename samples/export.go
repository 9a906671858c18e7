package samples

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
)

// Row is the flat, exported form of a Sample: one JSONL line or one Parquet
// row. Lists are plain JSON arrays / Parquet LIST columns; the loss mask is
// int32 0/1 (portable to every reader); per-token advantages are written out
// so other trainers need not broadcast.
type Row struct {
	RolloutID     string   `json:"rollout_id" parquet:"rollout_id"`
	GroupID       string   `json:"group_id" parquet:"group_id"`
	AttemptID     string   `json:"attempt_id" parquet:"attempt_id"`
	Agent         string   `json:"agent,omitempty" parquet:"agent"`
	Index         int32    `json:"index" parquet:"index"`
	CallIDs       []string `json:"call_ids" parquet:"call_ids,list"`
	ModelVersions []int64  `json:"model_versions" parquet:"model_versions,list"`
	// CallStarts[k], CallEnds[k]: the response tokens of CallIDs[k] are
	// IDs[CallStarts[k]:CallEnds[k]]; CallSeqs[k] is the call's position
	// among its attempt's model calls.
	CallStarts      []int32   `json:"call_starts,omitempty" parquet:"call_starts,list"`
	CallEnds        []int32   `json:"call_ends,omitempty" parquet:"call_ends,list"`
	CallSeqs        []int32   `json:"call_seqs,omitempty" parquet:"call_seqs,list"`
	IDs             []int32   `json:"ids" parquet:"ids,list"`
	LossMask        []int32   `json:"loss_mask" parquet:"loss_mask,list"`
	Logprobs        []float32 `json:"logprobs" parquet:"logprobs,list"`
	Advantages      []float32 `json:"advantages" parquet:"advantages,list"`
	Weights         []float32 `json:"weights" parquet:"weights,list"`
	Advantage       float64   `json:"advantage" parquet:"advantage"`
	Reward          float64   `json:"reward" parquet:"reward"`
	RewardMissing   bool      `json:"reward_missing" parquet:"reward_missing"`
	CallRewards     string    `json:"call_rewards,omitempty" parquet:"call_rewards"` // JSON object call id → reward, "" when none
	SplitReason     string    `json:"split_reason" parquet:"split_reason"`
	SplitAt         int32     `json:"split_at" parquet:"split_at"`
	SplitDetail     string    `json:"split_detail,omitempty" parquet:"split_detail"`
	Truncated       bool      `json:"truncated" parquet:"truncated"`
	TruncatedTokens int32     `json:"truncated_tokens" parquet:"truncated_tokens"`
}

// ToRow flattens s.
func (s *Sample) ToRow() Row {
	r := Row{
		RolloutID: s.RolloutID, GroupID: s.GroupID, AttemptID: s.AttemptID, Agent: s.Agent, Index: int32(s.Index),
		CallIDs: s.CallIDs, ModelVersions: s.ModelVersions, IDs: s.IDs, Logprobs: s.Logprobs,
		Advantages: s.TokenAdvantages(), Weights: s.Weights,
		Advantage: s.Advantage, Reward: s.Reward, RewardMissing: s.RewardMissing,
		SplitReason: string(s.Split.Reason), SplitAt: int32(s.Split.At), SplitDetail: s.Split.Detail,
		Truncated: s.Truncated, TruncatedTokens: int32(s.TruncatedTokens),
	}
	r.LossMask = make([]int32, len(s.LossMask))
	for i, m := range s.LossMask {
		r.LossMask[i] = int32(m)
	}
	for k, sp := range s.CallSpans {
		r.CallStarts, r.CallEnds = append(r.CallStarts, int32(sp[0])), append(r.CallEnds, int32(sp[1]))
		if k < len(s.CallSeqs) {
			r.CallSeqs = append(r.CallSeqs, int32(s.CallSeqs[k]))
		}
	}
	if len(s.CallRewards) > 0 {
		b, _ := json.Marshal(s.CallRewards) // a map[string]float64 of finite values always marshals
		r.CallRewards = string(b)
	}
	return r
}

// Sample rebuilds a Sample from r. Per-token advantages equal to
// Advantage wherever the mask is 1 are broadcast again; others (credit
// assignment per call) are kept, as spans of equal advantages.
func (r *Row) Sample() (Sample, error) {
	s := Sample{
		RolloutID: r.RolloutID, GroupID: r.GroupID, AttemptID: r.AttemptID, Agent: r.Agent, Index: int(r.Index),
		CallIDs: r.CallIDs, ModelVersions: r.ModelVersions, IDs: r.IDs, Logprobs: r.Logprobs,
		Weights: r.Weights, Advantage: r.Advantage, Reward: r.Reward, RewardMissing: r.RewardMissing,
		Split:     Split{Reason: SplitReason(r.SplitReason), At: int(r.SplitAt), Detail: r.SplitDetail},
		Truncated: r.Truncated, TruncatedTokens: int(r.TruncatedTokens),
	}
	if len(r.LossMask) != len(r.IDs) || len(r.Logprobs) != len(r.IDs) || (len(r.Weights) != 0 && len(r.Weights) != len(r.IDs)) {
		return Sample{}, fmt.Errorf("samples: row %s/%d: %d ids, %d mask, %d logprobs, %d weights",
			r.RolloutID, r.Index, len(r.IDs), len(r.LossMask), len(r.Logprobs), len(r.Weights))
	}
	s.LossMask = make([]uint8, len(r.LossMask))
	for i, m := range r.LossMask {
		if m != 0 && m != 1 {
			return Sample{}, fmt.Errorf("samples: row %s/%d: loss mask value %d", r.RolloutID, r.Index, m)
		}
		s.LossMask[i] = uint8(m)
	}
	if len(r.Advantages) != 0 && len(r.Advantages) != len(r.IDs) {
		return Sample{}, fmt.Errorf("samples: row %s/%d: %d ids, %d advantages", r.RolloutID, r.Index, len(r.IDs), len(r.Advantages))
	}
	if len(r.CallStarts) != len(r.CallEnds) || len(r.CallSeqs) != 0 && len(r.CallSeqs) != len(r.CallStarts) {
		return Sample{}, fmt.Errorf("samples: row %s/%d: %d call_starts, %d call_ends, %d call_seqs", r.RolloutID, r.Index, len(r.CallStarts), len(r.CallEnds), len(r.CallSeqs))
	}
	for k := range r.CallStarts {
		a, b := int(r.CallStarts[k]), int(r.CallEnds[k])
		if a < 0 || b < a || b > len(r.IDs) {
			return Sample{}, fmt.Errorf("samples: row %s/%d: call span [%d, %d) outside %d ids", r.RolloutID, r.Index, a, b, len(r.IDs))
		}
		s.CallSpans = append(s.CallSpans, [2]int{a, b})
		if len(r.CallSeqs) > 0 {
			s.CallSeqs = append(s.CallSeqs, int(r.CallSeqs[k]))
		}
	}
	for i, a := range r.Advantages {
		if s.LossMask[i] != 0 && a != float32(s.Advantage) {
			// Per-call advantages (credit assignment): one per call span
			// when the row has them, else per run of equal values.
			if len(s.CallSpans) == 0 {
				s.CallSpans, s.CallAdvantages = advantageSpans(s.LossMask, r.Advantages)
				break
			}
			s.CallAdvantages = make([]float64, len(s.CallSpans))
			for k, sp := range s.CallSpans {
				s.CallAdvantages[k] = s.Advantage
				for t := sp[0]; t < sp[1]; t++ {
					if s.LossMask[t] != 0 {
						s.CallAdvantages[k] = float64(r.Advantages[t])
						break
					}
				}
			}
			break
		}
	}
	if r.CallRewards != "" {
		if err := json.Unmarshal([]byte(r.CallRewards), &s.CallRewards); err != nil {
			return Sample{}, fmt.Errorf("samples: row %s/%d: call_rewards: %w", r.RolloutID, r.Index, err)
		}
	}
	return s, nil
}

// advantageSpans splits the trained tokens into runs of equal advantage.
func advantageSpans(mask []uint8, adv []float32) (spans [][2]int, vals []float64) {
	for i := 0; i < len(mask); i++ {
		if mask[i] == 0 {
			continue
		}
		j := i + 1
		for j < len(mask) && mask[j] != 0 && adv[j] == adv[i] {
			j++
		}
		spans, vals = append(spans, [2]int{i, j}), append(vals, float64(adv[i]))
		i = j - 1
	}
	return spans, vals
}

// WriteJSONL writes one Row per line.
func WriteJSONL(w io.Writer, ss []Sample) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range ss {
		if err := enc.Encode(ss[i].ToRow()); err != nil {
			return fmt.Errorf("samples: jsonl: sample %d: %w", i, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("samples: jsonl: %w", err)
	}
	return nil
}

// ReadJSONL reads what WriteJSONL wrote.
func ReadJSONL(r io.Reader) ([]Sample, error) {
	dec := json.NewDecoder(bufio.NewReader(r))
	var out []Sample
	for line := 1; ; line++ {
		var row Row
		if err := dec.Decode(&row); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("samples: jsonl: record %d: %w", line, err)
		}
		s, err := row.Sample()
		if err != nil {
			return nil, fmt.Errorf("samples: jsonl: record %d: %w", line, err)
		}
		out = append(out, s)
	}
}

// ParquetWriter streams samples into one Parquet file (zstd-compressed).
type ParquetWriter struct {
	w *parquet.GenericWriter[Row]
}

// NewParquetWriter starts a Parquet file on w; Close finishes it.
func NewParquetWriter(w io.Writer) *ParquetWriter {
	return &ParquetWriter{w: parquet.NewGenericWriter[Row](w, parquet.Compression(&parquet.Zstd))}
}

// Write appends samples.
func (p *ParquetWriter) Write(ss []Sample) error {
	rows := make([]Row, len(ss))
	for i := range ss {
		rows[i] = ss[i].ToRow()
	}
	if _, err := p.w.Write(rows); err != nil {
		return fmt.Errorf("samples: parquet: %w", err)
	}
	return nil
}

// Close writes the footer.
func (p *ParquetWriter) Close() error {
	if err := p.w.Close(); err != nil {
		return fmt.Errorf("samples: parquet: %w", err)
	}
	return nil
}

// WriteParquet writes samples as one Parquet file.
func WriteParquet(w io.Writer, ss []Sample) error {
	pw := NewParquetWriter(w)
	if err := pw.Write(ss); err != nil {
		return err
	}
	return pw.Close()
}

// ReadParquet reads a Parquet file written by WriteParquet.
func ReadParquet(r io.ReaderAt, size int64) ([]Sample, error) {
	rows, err := parquet.Read[Row](r, size)
	if err != nil {
		return nil, fmt.Errorf("samples: parquet: %w", err)
	}
	out := make([]Sample, len(rows))
	for i := range rows {
		if out[i], err = rows[i].Sample(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// MarshalJSON encodes a Sample as its Row (so the loss mask is a number
// array, not base64).
func (s Sample) MarshalJSON() ([]byte, error) { return json.Marshal(s.ToRow()) }

// UnmarshalJSON decodes what MarshalJSON wrote.
func (s *Sample) UnmarshalJSON(b []byte) error {
	var r Row
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	x, err := r.Sample()
	if err != nil {
		return err
	}
	*s = x
	return nil
}

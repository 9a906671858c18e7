package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/samples"
	"github.com/aglrl/agl/store"
)

// TokensView answers GET /api/dashboard/rollouts/{id}/tokens: an attempt's
// calls merged into training samples exactly as package samples does it
// (default build config: merge on exact token prefixes, split on a model
// version change), token by token.
type TokensView struct {
	RolloutID string `json:"rollout_id"`
	Attempt   string `json:"attempt"`
	// Decoded is true when Pieces hold each token's text.
	Decoded  bool               `json:"decoded"`
	Samples  []TokenSample      `json:"samples"`
	Excluded []samples.Excluded `json:"excluded"`
}

// TokenSample is one training sample: parallel per-token arrays, where it
// started and why, and where each merged call's tokens lie.
type TokenSample struct {
	Index         int           `json:"index"`
	Split         samples.Split `json:"split"`
	ModelVersions []int64       `json:"model_versions"`
	Truncated     bool          `json:"truncated,omitempty"`
	IDs           []int32       `json:"ids"`
	Mask          []int8        `json:"mask"` // not []uint8: that encodes as base64
	Logprobs      []float32     `json:"logprobs"`
	Pieces        []string      `json:"pieces,omitempty"`
	Calls         []CallSpan    `json:"calls"`
}

// CallSpan locates one call in a sample: the prompt tokens it added are
// [PromptStart, ResponseStart), its response [ResponseStart, ResponseEnd).
type CallSpan struct {
	CallID        string `json:"call_id"`
	PromptStart   int    `json:"prompt_start"`
	ResponseStart int    `json:"response_start"`
	ResponseEnd   int    `json:"response_end"`
	// Advantage is the advantage the trainer gave the call's response
	// tokens, as its step recorded it (absent: not trained, or the step
	// is not recorded yet).
	Advantage *float64 `json:"advantage,omitempty"`
}

func (d *Dashboard) tokens(w http.ResponseWriter, r *http.Request) error {
	ro, err := d.opt.Store.GetRollout(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	aid, err := d.attemptOf(r, ro)
	if err != nil {
		return err
	}
	v := TokensView{RolloutID: ro.ID, Attempt: aid, Decoded: d.opt.Tokenizer != nil || len(d.opt.Tokenizers) > 0, Samples: []TokenSample{}, Excluded: []samples.Excluded{}}
	if aid != "" {
		evs, err := d.opt.Store.ListEvents(r.Context(), store.EventFilter{RolloutID: ro.ID, AttemptID: aid, Types: []string{store.EventModelRequest}})
		if err != nil {
			return err
		}
		v.Samples, v.Excluded = TokenSamples(ro, aid, evs, d.opt.Tokenizer, d.opt.Tokenizers)
		adv, err := d.advantages(r.Context(), ro)
		if err != nil {
			return err
		}
		for i := range v.Samples {
			for k := range v.Samples[i].Calls {
				c := &v.Samples[i].Calls[k]
				if a, ok := adv[c.CallID]; ok {
					c.Advantage = &a
				}
			}
		}
	}
	api.WriteJSON(w, http.StatusOK, v)
	return nil
}

// advantages returns the advantages by call id that the train step of
// rollout ro (its metadata's step) recorded for it; none for a rollout
// that no step trained.
func (d *Dashboard) advantages(ctx context.Context, ro store.Rollout) (map[string]float64, error) {
	var meta struct {
		Step *int64 `json:"step"`
	}
	if ro.Mode != store.ModeTrain || json.Unmarshal(ro.Metadata, &meta) != nil || meta.Step == nil {
		return nil, nil
	}
	steps, err := d.opt.Store.ListTrainSteps(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, s := range steps {
		if s.Mode != store.ModeTrain || s.Step != *meta.Step {
			continue
		}
		var m struct {
			Advantages map[string]map[string]float64 `json:"advantages"`
		}
		if json.Unmarshal(s.Metrics, &m) == nil && m.Advantages[ro.ID] != nil {
			return m.Advantages[ro.ID], nil
		}
	}
	return nil, nil
}

// TokenSamples builds the per-token view of one attempt's model_request
// events; byModel[m] decodes the text of a sample whose calls model m
// served (a sample never mixes agents, so never policies), dec (optional)
// the others'.
func TokenSamples(ro store.Rollout, attemptID string, events []store.Event, dec Decoder, byModel map[string]Decoder) ([]TokenSample, []samples.Excluded) {
	calls, bad := samples.Calls(events, attemptID)
	ss, excl := samples.Build(samples.BuildConfig{}, ro.ID, ro.GroupID, attemptID, calls)
	excl = append(bad, excl...)
	if excl == nil {
		excl = []samples.Excluded{}
	}
	byID := make(map[string]*api.ModelCall, len(calls))
	for i := range calls {
		byID[calls[i].CallID] = &calls[i]
	}
	out := make([]TokenSample, len(ss))
	for i, s := range ss {
		ts := TokenSample{Index: s.Index, Split: s.Split, ModelVersions: s.ModelVersions, Truncated: s.Truncated,
			IDs: s.IDs, Mask: make([]int8, len(s.LossMask)), Logprobs: s.Logprobs, Calls: []CallSpan{}}
		for k, m := range s.LossMask {
			ts.Mask[k] = int8(m)
		}
		at := 0
		for _, id := range s.CallIDs {
			c := byID[id]
			if c == nil {
				continue
			}
			rs := min(len(c.PromptIDs), len(s.IDs))
			re := min(rs+len(c.ResponseIDs), len(s.IDs))
			ts.Calls = append(ts.Calls, CallSpan{CallID: id, PromptStart: at, ResponseStart: rs, ResponseEnd: re})
			at = re
		}
		sdec := dec
		if len(s.CallIDs) > 0 && byID[s.CallIDs[0]] != nil {
			if md, ok := byModel[byID[s.CallIDs[0]].Model]; ok {
				sdec = md
			}
		}
		if sdec != nil {
			ts.Pieces = make([]string, len(s.IDs))
			for k, id := range s.IDs {
				ts.Pieces[k] = piece(sdec, id)
			}
		}
		out[i] = ts
	}
	return out, excl
}

// piece is one token's text. A token holding part of a multi-byte
// character shows its bytes as \xNN (when the decoder gives raw bytes)
// rather than a replacement character.
func piece(dec Decoder, id int32) string {
	bd, ok := dec.(interface{ DecodeBytes(ids []int32) []byte })
	if !ok {
		return dec.Decode([]int32{id})
	}
	b := bd.DecodeBytes([]int32{id})
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&sb, "\\x%02x", b[0])
		} else {
			sb.Write(b[:n])
		}
		b = b[n:]
	}
	return sb.String()
}

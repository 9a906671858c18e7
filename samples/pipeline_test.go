package samples

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/aglrl/agl/api"
	"github.com/aglrl/agl/store"
)

func ev(seq int64, att, typ, data string) store.Event {
	return store.Event{Seq: seq, RolloutID: "r", AttemptID: att, Type: typ, Data: json.RawMessage(data)}
}

func TestResolveReward(t *testing.T) {
	evs := []store.Event{
		ev(5, "a2", store.EventReward, `{"values":{"acc":1,"len":0.25},"primary":"acc"}`),
		ev(1, "a2", store.EventReward, `0.5`),
		ev(3, "a2", store.EventReward, `{"value":0.1,"call_id":"c1"}`),
		ev(4, "a2", store.EventReward, `{"value":0.3,"call_id":"c1"}`),
		ev(6, "a2", store.EventReward, `"oops"`),
		ev(7, "a1", store.EventReward, `9`), // another attempt
		ev(2, "a2", store.EventLog, `1`),
		// a4: the evaluator's reward (seq 12) outranks the harness's later
		// reward and per-call reward; a5: the reward file outranks a later
		// harness event, per-call rewards still count.
		ev(10, "a4", store.EventReward, `{"value":0.5,"call_id":"c1"}`),
		ev(11, "a4", store.EventReward, `{"value":0.5,"source":"reward_file"}`),
		ev(12, "a4", store.EventReward, `{"value":0,"source":"evaluator"}`),
		ev(13, "a4", store.EventReward, `{"value":1}`),
		ev(14, "a4", store.EventReward, `{"value":1,"call_id":"c2"}`),
		ev(20, "a5", store.EventReward, `{"value":0.25,"source":"reward_file"}`),
		ev(21, "a5", store.EventReward, `1`),
		ev(22, "a5", store.EventReward, `{"value":0.5,"call_id":"c1"}`),
	}
	tests := []struct {
		name    string
		cfg     RewardConfig
		att     string
		value   float64
		missing bool
		calls   map[string]float64
		bad     int
	}{
		{"last final wins, multi-dim primary", RewardConfig{}, "a2", 1, false, map[string]float64{"c1": .3}, 1},
		{"primary override", RewardConfig{Primary: "len"}, "a2", .25, false, map[string]float64{"c1": .3}, 1},
		{"add call rewards", RewardConfig{AddCallRewards: true}, "a2", 1.3, false, map[string]float64{"c1": .3}, 1},
		{"other attempt", RewardConfig{}, "a1", 9, false, nil, 0},
		{"missing → fill", RewardConfig{Fill: -1}, "a3", -1, true, nil, 0},
		{"evaluator outranks the harness", RewardConfig{AddCallRewards: true}, "a4", 0, false, nil, 0},
		{"reward file outranks events", RewardConfig{AddCallRewards: true}, "a5", 0.75, false, map[string]float64{"c1": .5}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rw := ResolveReward(tc.cfg, evs, tc.att)
			if !near(rw.Value, tc.value, 1e-12) || rw.Missing != tc.missing || rw.Bad != tc.bad || !reflect.DeepEqual(rw.CallRewards, tc.calls) {
				t.Fatalf("got %+v", rw)
			}
		})
	}
	// A multi-dimensional reward whose own primary is absent is usable only
	// with a configured primary.
	odd := []store.Event{ev(1, "a", store.EventReward, `{"values":{"x":2,"y":3}}`)}
	if rw := ResolveReward(RewardConfig{}, odd, "a"); !rw.Missing || rw.Bad != 1 {
		t.Errorf("ambiguous primary: %+v", rw)
	}
	if rw := ResolveReward(RewardConfig{Primary: "y"}, odd, "a"); rw.Missing || rw.Value != 3 {
		t.Errorf("configured primary: %+v", rw)
	}
}

func TestFromRollouts(t *testing.T) {
	var seq int64
	mkCalls := func(id string) []api.ModelCall {
		return []api.ModelCall{call(id+"-c0", 1, []int32{1, 2}, []int32{3}), call(id+"-c1", 1, []int32{1, 2, 3, 4}, []int32{5, 6})}
	}
	f := func(x float64) *float64 { return &x }
	rs := []store.Rollout{
		{ID: "a", GroupID: "g", Status: store.RolloutSucceeded, Mode: store.ModeTrain},
		{ID: "b", GroupID: "g", Status: store.RolloutSucceeded, Mode: store.ModeTrain, Attempts: []store.Attempt{{ID: "b-a1", Number: 1}, {ID: "b-a2", Number: 2}}},
		{ID: "c", GroupID: "g", Status: store.RolloutFailed, Mode: store.ModeTrain}, // no reward → fill 0
		{ID: "v", GroupID: "g", Status: store.RolloutSucceeded, Mode: store.ModeVal},
		{ID: "x", GroupID: "g", Status: store.RolloutCancelled, Mode: store.ModeTrain},
		{ID: "s", Status: store.RolloutSucceeded, Mode: store.ModeTrain}, // singleton group
	}
	evs := map[string][]store.Event{
		"a": toEvents(t, &seq, "a", "a-a1", mkCalls("a"), f(1)),
		// b: attempt 1 failed after one call; attempt 2 is the one.
		"b": append(toEvents(t, &seq, "b", "b-a1", mkCalls("b")[:1], f(5)), toEvents(t, &seq, "b", "b-a2", mkCalls("b"), f(0.5))...),
		"c": toEvents(t, &seq, "c", "c-a1", mkCalls("c"), nil),
		"v": toEvents(t, &seq, "v", "v-a1", mkCalls("v"), f(1)),
		"s": toEvents(t, &seq, "s", "s-a1", mkCalls("s"), f(1)),
	}
	res, err := FromRollouts(rs, evs, Config{Advantage: AdvantageConfig{Estimator: DrGRPO, DropZeroVariance: true}, Aggregation: RolloutMean})
	if err != nil {
		t.Fatal(err)
	}
	// Group g rewards: a=1, b=.5, c=0 (fill) → mean .5 → advantages .5, 0, -.5. s dropped.
	want := map[string]float64{"a": .5, "b": 0, "c": -.5}
	if len(res.Samples) != 3 {
		t.Fatalf("%d samples: %+v", len(res.Samples), res.Stats)
	}
	for _, s := range res.Samples {
		if !near(s.Advantage, want[s.RolloutID], 1e-12) {
			t.Errorf("rollout %s advantage %v want %v", s.RolloutID, s.Advantage, want[s.RolloutID])
		}
		if !slices.Equal(s.IDs, []int32{1, 2, 3, 4, 5, 6}) || len(s.CallIDs) != 2 {
			t.Errorf("rollout %s sample %v calls %v", s.RolloutID, s.IDs, s.CallIDs)
		}
		if s.RolloutID == "b" && s.AttemptID != "b-a2" {
			t.Errorf("rollout b trained attempt %s", s.AttemptID)
		}
		if (s.RolloutID == "c") != s.RewardMissing {
			t.Errorf("rollout %s reward missing %v", s.RolloutID, s.RewardMissing)
		}
		// rollout-mean: 3 trained tokens per rollout, 3 rollouts → 1/9.
		for j, w := range s.Weights {
			if s.LossMask[j] == 1 && !near(float64(w), 1./9, 1e-7) {
				t.Errorf("weight %v", w)
			}
		}
	}
	st := res.Stats
	if st.Rollouts != 4 || st.Skipped != 2 || st.MissingReward != 1 || st.Groups.Dropped != 1 || st.Groups.SingletonRollouts != 1 ||
		st.Samples != 3 || st.Tokens != 18 || st.TrainedTokens != 9 || st.Splits[SplitFirst] != 3 {
		t.Errorf("stats %s", st)
	}
	res2, err := FromRollouts(rs, evs, Config{DropMissingReward: true, IncludeVal: true})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Stats.DroppedMissing != 1 || res2.Stats.Rollouts != 5 || res2.Samples[0].Weights != nil {
		t.Errorf("stats %s", res2.Stats)
	}
	if _, err := FromRollouts(rs, evs, Config{Aggregation: "nope"}); err == nil {
		t.Error("bad aggregation accepted")
	}
}

func TestPack(t *testing.T) {
	var ss []Sample
	for i, l := range []int{3, 10, 2, 9, 8, 3, 25} {
		ss = append(ss, Sample{RolloutID: "r", Index: i, IDs: make([]int32, l)})
	}
	ss = append(ss, Sample{RolloutID: "empty"})
	bs, st := Pack(ss, 20, 0)
	var got [][]int
	for _, b := range bs {
		var ls []int
		for _, s := range b.Samples {
			ls = append(ls, len(s.IDs))
		}
		got = append(got, ls)
	}
	// FFD: 25 alone (oversize); [10 9] pad 20; [8 3] pad 16; [3 2] pad 6.
	want := [][]int{{25}, {10, 9}, {8, 3}, {3, 2}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v want %v", got, want)
	}
	if st.Batches != 4 || st.Tokens != 60 || st.Padded != 67 || st.Oversize != 1 {
		t.Fatalf("stats %+v", st)
	}
	for _, b := range bs {
		if len(b.Samples)*b.MaxLen != b.Padded || (b.Padded > 20 && len(b.Samples) > 1) {
			t.Fatalf("batch %+v", b)
		}
	}
	bs, _ = Pack(ss, 100, 2)
	for _, b := range bs {
		if len(b.Samples) > 2 {
			t.Fatalf("batch of %d samples, max 2", len(b.Samples))
		}
	}
}

// Random samples: every sample is packed exactly once, each batch respects
// the budget unless it holds one oversize sample, and padding stays small.
func TestPropertyPack(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for iter := 0; iter < 100; iter++ {
		n := 1 + rng.IntN(200)
		ss := make([]Sample, n)
		for i := range ss {
			ss[i] = Sample{RolloutID: "r", Index: i, IDs: make([]int32, 1+rng.IntN(1000))}
		}
		budget := 1024 + rng.IntN(8192)
		bs, st := Pack(ss, budget, 0)
		seen := map[int]bool{}
		for _, b := range bs {
			if b.Padded > budget && len(b.Samples) != 1 {
				t.Fatalf("batch over budget: %+v", b)
			}
			for _, s := range b.Samples {
				if seen[s.Index] {
					t.Fatal("sample packed twice")
				}
				seen[s.Index] = true
			}
		}
		if len(seen) != n {
			t.Fatalf("%d of %d samples packed", len(seen), n)
		}
		if naive := naivePadded(ss, budget); st.Padded > naive {
			t.Errorf("first-fit decreasing pads to %d tokens, arrival-order packing to %d", st.Padded, naive)
		}
	}
}

// naivePadded packs in arrival order, closing a batch when the next sample
// does not fit: the baseline Pack must beat.
func naivePadded(ss []Sample, budget int) int {
	total, k, maxLen := 0, 0, 0
	for i := range ss {
		l := len(ss[i].IDs)
		if k > 0 && (k+1)*max(maxLen, l) > budget {
			total += k * maxLen
			k, maxLen = 0, 0
		}
		k, maxLen = k+1, max(maxLen, l)
	}
	return total + k*maxLen
}

func exportSamples(t *testing.T) []Sample {
	rng := rand.New(rand.NewPCG(13, 14))
	rs, evs := synthStep(t, rng, 3, 4, synthOpts{turns: 5, sysLen: 10, userLen: 5, respLen: 6, toolLen: 4, pRerender: .3, version: 2})
	res, err := FromRollouts(rs, evs, Config{Aggregation: SeqMeanTokenMean})
	if err != nil {
		t.Fatal(err)
	}
	res.Samples[0].CallRewards = map[string]float64{"call-0": 0.25}
	res.Samples[1].Truncated, res.Samples[1].TruncatedTokens = true, 3
	return res.Samples
}

func TestJSONLRoundTrip(t *testing.T) {
	ss := exportSamples(t)
	var buf bytes.Buffer
	if err := WriteJSONL(&buf, ss); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(buf.Bytes(), []byte("\n")); n != len(ss) {
		t.Fatalf("%d lines for %d samples", n, len(ss))
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"loss_mask":[0,`)) {
		t.Fatalf("loss mask not a number array: %.300s", buf.String())
	}
	back, err := ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, ss) {
		t.Fatalf("round trip differs:\n%+v\n%+v", back[0], ss[0])
	}
	// Sample's own JSON is the same Row shape.
	b, _ := json.Marshal(ss[0])
	var s Sample
	if err := json.Unmarshal(b, &s); err != nil || !reflect.DeepEqual(s, ss[0]) {
		t.Fatalf("sample json: %v", err)
	}
	if _, err := ReadJSONL(bytes.NewBufferString(`{"ids":[1,2],"loss_mask":[0],"logprobs":[0,0]}`)); err == nil {
		t.Error("inconsistent row accepted")
	}
}

func TestParquetRoundTrip(t *testing.T) {
	ss := exportSamples(t)
	path := filepath.Join(t.TempDir(), "s.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteParquet(f, ss); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f, err = os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	back, err := ReadParquet(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(ss) {
		t.Fatalf("%d rows, want %d", len(back), len(ss))
	}
	for i := range ss {
		if !reflect.DeepEqual(back[i], ss[i]) {
			t.Fatalf("row %d differs:\n%+v\n%+v", i, back[i], ss[i])
		}
	}
}

func TestFromRolloutsStaleness(t *testing.T) {
	// Four groups of two rollouts; each rollout makes one call, except
	// g4-r0: two calls served by versions 4 and 6, split into two samples
	// by default (staleness 2 and 0) or merged into one (staleness 2: the
	// oldest call counts). Group staleness at current 6: g1 1, g2 3 (its
	// stalest sample), g3 0 (version 0 is unknown), g4 2.
	versions := map[string][]int64{
		"g1": {5, 5}, "g2": {3, 6}, "g3": {0, 0}, "g4": {6, 0},
	}
	multi := map[string][]int64{"g4-r0": {4, 6}}
	var seq int64
	var rs []store.Rollout
	evs := map[string][]store.Event{}
	for _, g := range []string{"g1", "g2", "g3", "g4"} {
		for j, v := range versions[g] {
			id := g + "-r" + string(rune('0'+j))
			vs := multi[id]
			if vs == nil {
				vs = []int64{v}
			}
			var calls []api.ModelCall
			prompt := []int32{1, 2}
			for k, cv := range vs {
				c := call(id+"-c"+string(rune('0'+k)), cv, slices.Clone(prompt), []int32{int32(3 + k)})
				calls = append(calls, c)
				prompt = append(prompt, c.ResponseIDs...)
			}
			reward := float64(j)
			rs = append(rs, store.Rollout{ID: id, GroupID: g, Status: store.RolloutSucceeded, Mode: store.ModeTrain})
			evs[id] = toEvents(t, &seq, id, id+"-a1", calls, &reward)
		}
	}
	all := []string{"g1", "g2", "g3", "g4"}
	tests := []struct {
		name      string
		sc        StalenessConfig
		merge     bool
		groups    []string // trained
		mean      float64
		max       int64
		staleG    int
		staleSamp int
	}{
		{"off", StalenessConfig{}, false, all, 0, 0, 0, 0},
		{"measured, no bound", StalenessConfig{Current: 6, Max: -1}, false, all, (1 + 1 + 3 + 0 + 0 + 0 + 2 + 0 + 0) / 9., 3, 0, 0},
		{"merged across versions", StalenessConfig{Current: 6, Max: -1}, true, all, (1 + 1 + 3 + 0 + 0 + 0 + 2 + 0) / 8., 3, 0, 0},
		{"max 2 drops g2", StalenessConfig{Current: 6, Max: 2}, false, []string{"g1", "g3", "g4"}, (1 + 1 + 0 + 0 + 2 + 0 + 0) / 7., 2, 1, 2},
		{"max 2 keep", StalenessConfig{Current: 6, Max: 2, Keep: true}, false, all, 7 / 9., 3, 1, 2},
		{"max 1 drops g2 and g4", StalenessConfig{Current: 6, Max: 1}, false, []string{"g1", "g3"}, .5, 1, 2, 5},
		{"max 0 keeps fresh only", StalenessConfig{Current: 6, Max: 0}, false, []string{"g3"}, 0, 0, 3, 7},
		{"max 3 keeps all", StalenessConfig{Current: 6, Max: 3}, false, all, 7 / 9., 3, 0, 0},
		{"versions past current count 0", StalenessConfig{Current: 3, Max: 0}, false, all, 0, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := FromRollouts(rs, evs, Config{Build: BuildConfig{MergeAcrossVersions: tc.merge}, Advantage: AdvantageConfig{Estimator: GRPO, DropZeroVariance: true},
				Aggregation: TokenMean, Staleness: tc.sc})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range res.Samples {
				if !slices.Contains(got, s.GroupID) {
					got = append(got, s.GroupID)
				}
				if tc.sc.Current > 0 && !tc.sc.Keep && tc.sc.Max >= 0 && s.Staleness(tc.sc.Current) > tc.sc.Max {
					t.Errorf("sample of %s has staleness %d > %d", s.RolloutID, s.Staleness(tc.sc.Current), tc.sc.Max)
				}
			}
			st := res.Stats
			if !slices.Equal(got, tc.groups) || !near(st.StalenessMean, tc.mean, 1e-12) || st.StalenessMax != tc.max ||
				st.StaleGroups != tc.staleG || st.StaleSamples != tc.staleSamp || st.StaleRollouts != 2*tc.staleG {
				t.Errorf("groups %v, stats %s stale rollouts %d samples %d", got, st, st.StaleRollouts, st.StaleSamples)
			}
			// Weights are spread over what is trained only: token-mean sums to 1.
			var sum float64
			for _, s := range res.Samples {
				for _, w := range s.Weights {
					sum += float64(w)
				}
			}
			if len(res.Samples) > 0 && !near(sum, 1, 1e-5) {
				t.Errorf("weights sum to %v", sum)
			}
		})
	}
}

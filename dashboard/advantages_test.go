package dashboard_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aglrl/agl/dashboard"
	"github.com/aglrl/agl/store"
)

// TestTokensViewAdvantages: the per-token view shows each call's advantage
// as the rollout's train step recorded it (by rollout and call id; another
// run's step of the same number does not count), none before the step is
// recorded; the training charts do not carry the advantages.
func TestTokensViewAdvantages(t *testing.T) {
	e := newEnv(t, admin)
	e.weatherRollout(t, "weather-1", 1, "Oslo", 0.5)
	var v dashboard.TokensView
	if st, body := e.get(t, "/api/dashboard/rollouts/weather-1/tokens", admin, &v); st != 200 || len(v.Samples) != 1 || len(v.Samples[0].Calls) != 2 {
		t.Fatalf("%d %s", st, body)
	}
	calls := v.Samples[0].Calls
	for _, c := range calls {
		if c.Advantage != nil {
			t.Fatalf("call %s has advantage %v before any step was recorded", c.CallID, *c.Advantage)
		}
	}
	ctx := testCtx(t)
	now := time.Now().UTC()
	steps := []store.TrainStep{
		{Run: "other", Mode: store.ModeTrain, Step: 1, Time: now, Metrics: json.RawMessage(`{"step":1,"advantages":{"weather-9":{"x":1}}}`)},
		{Run: "agl", Mode: store.ModeTrain, Step: 1, Time: now.Add(time.Second), Metrics: json.RawMessage(fmt.Sprintf(
			`{"step":1,"reward_mean":0.5,"advantages":{"weather-1":{%q:0.75,%q:-0.25}}}`, calls[0].CallID, calls[1].CallID))},
	}
	for _, s := range steps {
		if err := e.st.PutTrainStep(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if st, body := e.get(t, "/api/dashboard/rollouts/weather-1/tokens", admin, &v); st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	for k, want := range []float64{0.75, -0.25} {
		if c := v.Samples[0].Calls[k]; c.Advantage == nil || *c.Advantage != want {
			t.Errorf("call %d (%s): advantage %v, want %v", k, c.CallID, c.Advantage, want)
		}
	}
	var tv dashboard.TrainView
	if st, body := e.get(t, "/api/dashboard/train?run=agl", admin, &tv); st != 200 || len(tv.Steps) != 1 {
		t.Fatalf("%d %s", st, body)
	}
	if m := string(tv.Steps[0].Metrics); strings.Contains(m, "advantages") || !strings.Contains(m, "reward_mean") {
		t.Errorf("chart step metrics %s", m)
	}
}

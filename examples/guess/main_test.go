package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
)

func TestReward(t *testing.T) {
	for _, tc := range []struct {
		found bool
		last  int
		want  float64
	}{{true, 7, 1}, {false, 7, 0.5}, {false, 15, 0.375}, {false, 0, 0.390625}} {
		if got := Reward(Task{Secret: 7, Max: 32, Turns: 6}, tc.found, tc.last); got != tc.want {
			t.Errorf("Reward(found=%v, last=%d) = %v, want %v", tc.found, tc.last, got, tc.want)
		}
	}
}

// TestPlay runs a game through the real openai-go client against an
// OpenAI-compatible server that always answers "16".
func TestPlay(t *testing.T) {
	for _, tc := range []struct {
		secret    int
		wantCalls int32
		want      float64
	}{{16, 1, 1}, {8, 6, Reward(Task{Secret: 8, Max: 32}, false, 16)}} {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				Messages []json.RawMessage `json:"messages"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			n := calls.Add(1)
			if len(req.Messages) != 2*int(n) { // system + user, then an answer and feedback per turn
				t.Errorf("call %d sent %d messages", n, len(req.Messages))
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"16"}}]}`))
		}))
		out := filepath.Join(t.TempDir(), "reward")
		task, _ := json.Marshal(Task{Secret: tc.secret, Max: 32, Turns: 6})
		t.Setenv("OPENAI_BASE_URL", srv.URL)
		t.Setenv("OPENAI_API_KEY", "k")
		t.Setenv("AGL_TASK", string(task))
		t.Setenv("AGL_REWARD_FILE", out)
		if err := play(); err != nil {
			t.Fatal(err)
		}
		srv.Close()
		b, _ := os.ReadFile(out)
		got, _ := strconv.ParseFloat(string(b), 64)
		if got != tc.want || calls.Load() != tc.wantCalls {
			t.Errorf("secret %d: reward %v after %d calls, want %v after %d", tc.secret, got, calls.Load(), tc.want, tc.wantCalls)
		}
	}
}

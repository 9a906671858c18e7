// Command guess is the harness of the guess-the-number example: a multi-turn
// game in which the model finds a hidden number from "higher"/"lower"
// feedback. It is an ordinary OpenAI client (the official openai-go SDK)
// that knows nothing of agl: it reads OPENAI_BASE_URL, OPENAI_API_KEY and
// the task from AGL_TASK, and writes its reward to AGL_REWARD_FILE.
//
// Every turn re-sends the whole conversation, so this is the case where the
// gateway's token state and the samples package's merging matter: the calls
// of one game merge into one training sample.
//
//	guess -gen 200 -seed 1 > tasks.jsonl   # seeded tasks
//	guess                                  # play one game (as a harness)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Task is one game.
type Task struct {
	Secret int `json:"secret"`
	Max    int `json:"max"`
	Turns  int `json:"turns"`
}

func main() {
	gen := flag.Int("gen", 0, "write this many seeded tasks as JSONL to stdout instead of playing")
	seed := flag.Uint64("seed", 1, "task seed")
	demos := flag.Int("demos", 0, "write this many binary-search games as SFT conversations (JSONL) instead of playing")
	flag.Parse()
	if *demos > 0 {
		writeDemos(*demos, *seed)
		return
	}
	if *gen > 0 {
		r := rand.New(rand.NewPCG(*seed, *seed^0x9e3779b97f4a7c15))
		enc := json.NewEncoder(os.Stdout)
		for i := 0; i < *gen; i++ {
			enc.Encode(Task{Secret: 1 + r.IntN(32), Max: 32, Turns: 6})
		}
		return
	}
	if err := play(); err != nil {
		fmt.Fprintln(os.Stderr, "guess:", err)
		os.Exit(1)
	}
}

// writeDemos writes games played by binary search, in agl's conversation
// format, for a supervised warm start (`agl sft`).
func writeDemos(n int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	enc := json.NewEncoder(os.Stdout)
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	for i := 0; i < n; i++ {
		t := Task{Secret: 1 + r.IntN(32), Max: 32, Turns: 6}
		msgs := []msg{{"system", systemPrompt(t)}, {"user", "Guess."}}
		lo, hi := 1, t.Max
		for turn := 0; turn < t.Turns; turn++ {
			g := (lo + hi) / 2
			msgs = append(msgs, msg{"assistant", strconv.Itoa(g)})
			if g == t.Secret {
				msgs = append(msgs, msg{"user", "Correct."})
				break
			}
			if g < t.Secret {
				lo = g + 1
				msgs = append(msgs, msg{"user", "Higher."})
			} else {
				hi = g - 1
				msgs = append(msgs, msg{"user", "Lower."})
			}
		}
		enc.Encode(map[string]any{"messages": msgs[:len(msgs)-1]})
	}
}

func systemPrompt(t Task) string {
	return fmt.Sprintf("Find my number from 1 to %d. Answer with one number.", t.Max)
}

var number = regexp.MustCompile(`-?\d+`)

// Reward scores a game: 1 when found, else up to 0.5 for getting close.
func Reward(t Task, found bool, last int) float64 {
	if found {
		return 1
	}
	d := last - t.Secret
	if d < 0 {
		d = -d
	}
	return 0.5 * max(0, 1-float64(d)/float64(t.Max))
}

func play() error {
	var t Task
	if err := json.Unmarshal([]byte(os.Getenv("AGL_TASK")), &t); err != nil {
		return fmt.Errorf("AGL_TASK: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := openai.NewClient(option.WithMaxRetries(2)) // OPENAI_BASE_URL, OPENAI_API_KEY from the env
	msgs := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(systemPrompt(t)),
		openai.UserMessage("Guess."),
	}
	found, last := false, 0
	for turn := 0; turn < t.Turns && !found; turn++ {
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "agl", Messages: msgs, MaxTokens: openai.Int(8)})
		if err != nil {
			return err
		}
		if len(resp.Choices) == 0 {
			return fmt.Errorf("no choices")
		}
		reply := resp.Choices[0].Message
		msgs = append(msgs, reply.ToParam())
		feedback := "Answer with one number."
		if m := number.FindString(reply.Content); m != "" {
			last, _ = strconv.Atoi(m)
			switch {
			case last == t.Secret:
				found = true
				feedback = "Correct."
			case last < t.Secret:
				feedback = "Higher."
			default:
				feedback = "Lower."
			}
		}
		msgs = append(msgs, openai.UserMessage(feedback))
	}
	r := Reward(t, found, last)
	if p := os.Getenv("AGL_REWARD_FILE"); p != "" {
		return os.WriteFile(p, []byte(strconv.FormatFloat(r, 'g', -1, 64)), 0o644)
	}
	fmt.Println(r)
	return nil
}

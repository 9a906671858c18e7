package chat

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aglrl/agl/tokenizer"
)

func llama3Tok(tb testing.TB) tokenizer.Tokenizer {
	tb.Helper()
	return mustLoad(tb, filepath.Join(fixtureDir, "llama3", "tokenizer.json"))
}

func mustLlama3(tb testing.TB, tok tokenizer.Tokenizer) *Llama3 {
	tb.Helper()
	t, err := NewLlama3(tok)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// TestLlama3Golden compares with Llama 3's own Jinja template
// (testdata/gen_llama3_render.py).
func TestLlama3Golden(t *testing.T) {
	tok := llama3Tok(t)
	tmpl := mustLlama3(t, tok)
	f, err := os.Open("testdata/llama3_render.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var r renderRec
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		n++
		ids, err := tmpl.Render(r.Conversation, r.Gen)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Decode(ids); got != r.Text {
			t.Errorf("%s: text\n got %q\nwant %q", r.Name, got, r.Text)
		}
		if want := tok.Encode(r.Text); !slices.Equal(ids, want) {
			t.Errorf("%s: ids differ from whole-text tokenization", r.Name)
		}
	}
	if n < 3 {
		t.Fatalf("only %d golden renders", n)
	}
}

func llamaReplyIDs(t *Llama3, m Message) []int32 {
	return append(t.tok.Encode(llamaReply(m)), t.eot)
}

// TestLlama3Extension is TestExtensionProperty for the Llama 3 template
// (no "\n" after the end-of-turn id here).
func TestLlama3Extension(t *testing.T) {
	for name, tok := range map[string]tokenizer.Tokenizer{"llama3": llama3Tok(t), "byte": byteWithLlamaTokens(t)} {
		tmpl := mustLlama3(t, tok)
		c := toolConversation()
		checked := 0
		for k, m := range c.Messages {
			if m.Role != RoleAssistant {
				continue
			}
			p, err := tmpl.Render(withPrefix(c, k), true)
			if err != nil {
				t.Fatal(err)
			}
			g := llamaReplyIDs(tmpl, m)
			full, _ := tmpl.Render(withPrefix(c, k+1), false)
			if trimmedReplies(c, k, k+1) && !slices.Equal(full, concat(p, g)) {
				t.Fatalf("%s k=%d: Render(c[:k+1]) != p+g", name, k)
			}
			for j := k + 2; j <= len(c.Messages); j++ {
				if !trimmedReplies(c, k, j) {
					continue // Llama 3's template trims them from scratch
				}
				cj := withPrefix(c, j)
				whole, err := tmpl.Render(cj, true)
				if err != nil {
					t.Fatal(err)
				}
				suf, err := tmpl.RenderSuffix(cj, k+1)
				if err != nil {
					t.Fatal(err)
				}
				if want := concat(p, g, suf); !slices.Equal(whole, want) {
					t.Fatalf("%s k=%d j=%d:\n got %q\nwant %q", name, k, j, tok.Decode(whole), tok.Decode(want))
				}
				checked++
			}
		}
		if checked < 6 {
			t.Fatalf("only %d checked", checked)
		}
		// Masked render marks exactly the replies.
		ids, mask, err := tmpl.RenderMasked(c)
		if err != nil {
			t.Fatal(err)
		}
		var got, want []int32
		for i, on := range mask {
			if on {
				got = append(got, ids[i])
			}
		}
		for _, m := range c.Messages {
			if m.Role == RoleAssistant {
				m.Content = strings.TrimSpace(m.Content)
				want = append(want, llamaReplyIDs(tmpl, m)...)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: masked %q want %q", name, tok.Decode(got), tok.Decode(want))
		}
	}
}

// trimmedReplies reports whether the replies c.Messages[k:j] have no
// surrounding whitespace (which a render from scratch trims).
func trimmedReplies(c Conversation, k, j int) bool {
	for _, m := range c.Messages[k:j] {
		if m.Role == RoleAssistant && m.Content != strings.TrimSpace(m.Content) {
			return false
		}
	}
	return true
}

func byteWithLlamaTokens(tb testing.TB) tokenizer.Tokenizer {
	tok, err := tokenizer.NewByte(TokBeginOfText, TokEndOfText3, TokHeaderStart, TokHeaderEnd, TokEOT)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

func TestLlama3Parse(t *testing.T) {
	tok := llama3Tok(t)
	tmpl := mustLlama3(t, tok)
	msgs := []Message{
		{Content: "Plain."},
		{Content: "  spaced \n"},
		{ToolCalls: []ToolCall{{Name: "f", Arguments: `{"a": 1}`}}},
		{Content: "Let me check.", ToolCalls: []ToolCall{{Name: "get_weather", Arguments: "{\"city\": \"Zürich\",\n \"x\": [1]}"}, {Name: "now", Arguments: `{}`}}},
	}
	for i, m := range msgs {
		m.Role = RoleAssistant
		got, err := tmpl.Parse(llamaReplyIDs(tmpl, m))
		if err != nil {
			t.Fatal(err)
		}
		for j := range got.ToolCalls {
			if !strings.HasPrefix(got.ToolCalls[j].ID, "call_") {
				t.Errorf("%d: id %q", i, got.ToolCalls[j].ID)
			}
			got.ToolCalls[j].ID = ""
		}
		if got.Content != m.Content || !slices.Equal(got.ToolCalls, m.ToolCalls) {
			t.Errorf("%d: round trip\n got %+v\nwant %+v", i, got, m)
		}
	}
	for _, text := range []string{`{"not": "a call"}`, `{"name": "f"} trailing`, `{broken`, "text\n{\"name\": \"\"}"} {
		got, _ := tmpl.Parse(tok.Encode(text))
		if got.Content != text || len(got.ToolCalls) != 0 {
			t.Errorf("%q parsed as %+v", text, got)
		}
	}
	got, _ := tmpl.Parse(tok.Encode(`{"name": "f", "arguments": "{\"k\": 2}"}`))
	if len(got.ToolCalls) != 1 || got.ToolCalls[0].Arguments != `{"k": 2}` {
		t.Errorf("arguments form: %+v", got)
	}
	eot, _ := tok.TokenID(TokEOT)
	eos, _ := tok.TokenID(TokEndOfText3)
	if s := tmpl.StopIDs(); !slices.Contains(s, eot) || !slices.Contains(s, eos) || tmpl.EndOfTurnID() != eot {
		t.Errorf("stop ids %v", s)
	}
	if _, err := NewLlama3(byteTok(t)); err == nil {
		t.Error("Llama 3 template over a tokenizer without its tokens accepted")
	}
}

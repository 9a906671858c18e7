package chat

import (
	"bufio"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aglrl/agl/tokenizer"
)

// fixtureDir is testdata/tokenizer at the repository root (the golden
// tokenizer fixtures, with their licenses); tests run in the package
// directory.
const fixtureDir = "../testdata/tokenizer"

var qwenOnce struct {
	sync.Once
	tok tokenizer.Tokenizer
	err error
}

func qwen3(tb testing.TB) tokenizer.Tokenizer {
	tb.Helper()
	qwenOnce.Do(func() {
		qwenOnce.tok, qwenOnce.err = tokenizer.LoadFile(filepath.Join(fixtureDir, "qwen3", "tokenizer.json"))
	})
	if qwenOnce.err != nil {
		tb.Fatalf("load qwen3 tokenizer: %v", qwenOnce.err)
	}
	return qwenOnce.tok
}

func byteTok(tb testing.TB) tokenizer.Tokenizer {
	tb.Helper()
	tok, err := tokenizer.NewByte()
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

func mustChatML(tb testing.TB, tok tokenizer.Tokenizer, opts ChatMLOptions) *ChatML {
	tb.Helper()
	t, err := NewChatML(tok, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

type renderRec struct {
	Name         string       `json:"name"`
	Conversation Conversation `json:"conversation"`
	Gen          bool         `json:"add_generation_prompt"`
	// DisableThinking: rendered with enable_thinking=False.
	DisableThinking bool   `json:"disable_thinking"`
	Text            string `json:"text"`
}

// TestQwen3Golden renders conversations and compares with the text Qwen3's
// own Jinja template gives (testdata/gen_qwen3_render.py), both as text
// and as ids of the whole string tokenized at once.
func TestQwen3Golden(t *testing.T) {
	tok := qwen3(t)
	tmpls := map[bool]*ChatML{false: mustChatML(t, tok, ChatMLOptions{}), true: mustChatML(t, tok, ChatMLOptions{DisableThinking: true})}
	f, err := os.Open("testdata/qwen3_render.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	n := 0
	for sc.Scan() {
		var r renderRec
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		n++
		t.Run(r.Name, func(t *testing.T) {
			ids, err := tmpls[r.DisableThinking].Render(r.Conversation, r.Gen)
			if err != nil {
				t.Fatal(err)
			}
			if got := tok.Decode(ids); got != r.Text {
				t.Fatalf("text differs:\n got %q\nwant %q", got, r.Text)
			}
			if want := tok.Encode(r.Text); !slices.Equal(ids, want) {
				t.Errorf("ids differ from tokenizing the whole text:\n got %v\nwant %v", ids, want)
			}
		})
	}
	if n < 5 {
		t.Fatalf("only %d golden renders", n)
	}
}

// toolConversation is a multi-turn conversation with parallel tool calls,
// reasoning, text that starts with whitespace and non-ASCII.
func toolConversation() Conversation {
	return Conversation{
		Tools: []Tool{
			{Name: "get_weather", Description: "Get the weather.", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}`)},
			{Name: "now", Description: "Current time."},
		},
		Messages: []Message{
			{Role: RoleSystem, Content: "You are a helpful agent."},
			{Role: RoleUser, Content: "Weather in Paris and Tokyo?"},
			{Role: RoleAssistant, Content: "Checking both.", ToolCalls: []ToolCall{
				{ID: "a1", Name: "get_weather", Arguments: `{"city": "Paris"}`},
				{ID: "a2", Name: "get_weather", Arguments: `{"city": "Tokyo", "unit": "c"}`},
			}},
			{Role: RoleTool, ToolCallID: "a1", Content: "18C"},
			{Role: RoleTool, ToolCallID: "a2", Content: "{\"t\": 25}\n"},
			{Role: RoleAssistant, Reasoning: "Both known.", Content: "Paris 18C, Tokyo 25C."},
			{Role: RoleUser, Content: "  and the time? 😀"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "b1", Name: "now", Arguments: `{}`}}},
			{Role: RoleTool, Content: "12:00"},
			{Role: RoleAssistant, Content: "\n  It is noon.\n"},
			{Role: RoleUser, Content: "thanks"},
			{Role: RoleAssistant, Content: " "},
		},
	}
}

// replyIDs are the ids a model emits for m: the reply text tokenized on its
// own, then <|im_end|>.
func replyIDs(tmpl *ChatML, m Message) []int32 {
	return append(tmpl.tok.Encode(tmpl.replyText(m)), tmpl.imEnd)
}

// jinjaKeeps reports whether a render from scratch of c[:j] shows reply k
// as generated, so that the extension property holds as an equality of
// renders: always for the compact variant; for Qwen3's template (whose
// history drops the reasoning of replies before the last user query and
// never shows DisableThinking's empty think block but on a final reply)
// when reply k follows c[:j]'s last user query, and either is the final
// message (with reasoning, or without under DisableThinking), or is
// followed by more without DisableThinking and c[:j] does not end with a
// reply without reasoning (which gets an empty think block).
func jinjaKeeps(o ChatMLOptions, c Conversation, k, j int) bool {
	if o.CompactTools {
		return true
	}
	if k <= lastQuery(c.Messages[:j]) {
		return false
	}
	if j == k+1 {
		return (c.Messages[k].Reasoning == "") == o.DisableThinking
	}
	last := c.Messages[j-1]
	return !o.DisableThinking && (last.Role != RoleAssistant || last.Reasoning != "")
}

func withPrefix(c Conversation, n int) Conversation {
	return Conversation{Tools: c.Tools, Messages: c.Messages[:n]}
}

// TestExtensionProperty checks, for every assistant reply k and every later
// prefix j of the conversation:
//
//	Render(c[:j], true) == Render(c[:k], true) + g_k + RenderSuffix(c[:j], k+1)
//
// and Render(c[:k+1], false) == Render(c[:k], true) + g_k + "\n", with g_k
// the reply ids as generated, for both tokenizers and all template options.
func TestExtensionProperty(t *testing.T) {
	toks := map[string]tokenizer.Tokenizer{"byte": byteTok(t), "qwen3": qwen3(t)}
	opts := map[string]ChatMLOptions{
		"chatml":   {},
		"compact":  {CompactTools: true},
		"nothink":  {DisableThinking: true},
		"compact2": {CompactTools: true, DisableThinking: true},
	}
	c := toolConversation()
	for tn, tok := range toks {
		for on, o := range opts {
			t.Run(tn+"/"+on, func(t *testing.T) {
				tmpl := mustChatML(t, tok, o)
				checked := 0
				for k, m := range c.Messages {
					if m.Role != RoleAssistant {
						continue
					}
					p, err := tmpl.Render(withPrefix(c, k), true)
					if err != nil {
						t.Fatal(err)
					}
					g := replyIDs(tmpl, m)
					full, err := tmpl.Render(withPrefix(c, k+1), false)
					if err != nil {
						t.Fatal(err)
					}
					nl := tok.Encode("\n")
					// Qwen3's template shows a final reply's think block even
					// when empty (the compact variant renders as generated).
					if jinjaKeeps(o, c, k, k+1) {
						if want := concat(p, g, nl); !slices.Equal(full, want) {
							t.Fatalf("k=%d: Render(c[:k+1]) is not p+g+\"\\n\":\n got %v\nwant %v", k, full, want)
						}
					}
					for j := k + 2; j <= len(c.Messages); j++ {
						cj := withPrefix(c, j)
						whole, err := tmpl.Render(cj, true)
						if err != nil {
							t.Fatal(err)
						}
						suf, err := tmpl.RenderSuffix(cj, k+1)
						if err != nil {
							t.Fatal(err)
						}
						if len(suf) == 0 || !slices.Equal(suf[:len(nl)], nl) {
							t.Fatalf("suffix does not start with \"\\n\": %v", suf)
						}
						if !jinjaKeeps(o, c, k, j) {
							continue
						}
						if want := concat(p, g, suf); !slices.Equal(whole, want) {
							t.Fatalf("k=%d j=%d: extension property broken:\n got %q\nwant %q", k, j, tok.Decode(whole), tok.Decode(want))
						}
						checked++
					}
				}
				if min := map[bool]int{true: 10, false: 4}[o.CompactTools]; (o.CompactTools || !o.DisableThinking) && checked < min {
					t.Fatalf("only %d cases checked", checked)
				}
			})
		}
	}
}

// TestRenderCutsAtGenerationPrompt shows why the generation prompt is
// tokenized apart: tokenizing header and reply as one string gives other
// ids for a reply starting with a newline, which a model can generate.
func TestRenderCutsAtGenerationPrompt(t *testing.T) {
	tok := qwen3(t)
	tmpl := mustChatML(t, tok, ChatMLOptions{})
	c := Conversation{Messages: []Message{{Role: RoleUser, Content: "hi"}, {Role: RoleAssistant, Content: "\nhello"}, {Role: RoleUser, Content: "ok"}}}
	ids, err := tmpl.Render(c, true)
	if err != nil {
		t.Fatal(err)
	}
	whole := tok.Encode(tok.Decode(ids))
	if slices.Equal(ids, whole) {
		t.Fatal("expected the cut render to differ from whole-string tokenization for a reply starting with \\n")
	}
	p, _ := tmpl.Render(withPrefix(c, 1), true)
	if want := concat(p, replyIDs(tmpl, c.Messages[1]), tok.Encode("\n")); !slices.Equal(ids[:len(want)], want) {
		t.Fatal("render is not prompt + reply ids + the rest")
	}
}

func concat(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestParseRoundTrip renders assistant replies and parses them back.
func TestParseRoundTrip(t *testing.T) {
	msgs := []Message{
		{Content: "Plain answer."},
		{Content: ""},
		{Content: "multi\nline\n\ntext  "},
		{Reasoning: "think hard", Content: "answer"},
		{Reasoning: "only thinking", Content: ""},
		{ToolCalls: []ToolCall{{Name: "f", Arguments: `{"a": 1}`}}},
		{Content: "Let me look.", ToolCalls: []ToolCall{{Name: "get_weather", Arguments: `{"city": "Zürich", "nested": {"x": [1, 2, "</tool_call>"]}}`}}},
		{Reasoning: "plan", Content: "two calls", ToolCalls: []ToolCall{{Name: "a", Arguments: `{}`}, {Name: "b_c-d", Arguments: `{"q":"x y"}`}}},
		{ToolCalls: []ToolCall{{Name: "a", Arguments: `{}`}, {Name: "a", Arguments: `{}`}, {Name: "a", Arguments: `{"k":"v"}`}}},
	}
	for tn, tok := range map[string]tokenizer.Tokenizer{"byte": byteTok(t), "qwen3": qwen3(t)} {
		for _, o := range []ChatMLOptions{{}, {DisableThinking: true, CompactTools: true}} {
			tmpl := mustChatML(t, tok, o)
			for i, m := range msgs {
				m.Role = RoleAssistant
				ids := replyIDs(tmpl, m)
				got, err := tmpl.Parse(ids)
				if err != nil {
					t.Fatalf("%s %d: %v", tn, i, err)
				}
				if len(got.ToolCalls) != len(m.ToolCalls) {
					t.Fatalf("%s %d: %d tool calls, want %d: %+v", tn, i, len(got.ToolCalls), len(m.ToolCalls), got)
				}
				seen := map[string]bool{}
				for j := range got.ToolCalls {
					if got.ToolCalls[j].ID == "" || seen[got.ToolCalls[j].ID] {
						t.Errorf("%s %d: tool call id %q empty or repeated", tn, i, got.ToolCalls[j].ID)
					}
					seen[got.ToolCalls[j].ID] = true
					m.ToolCalls[j].ID = got.ToolCalls[j].ID
				}
				if got.Role != m.Role || got.Content != m.Content || got.Reasoning != m.Reasoning || !slices.Equal(got.ToolCalls, m.ToolCalls) {
					t.Errorf("%s %d: round trip\n got %+v\nwant %+v", tn, i, got, m)
				}
				// Re-rendering the parsed message gives the same ids.
				if again := replyIDs(tmpl, got); !slices.Equal(again, ids) {
					t.Errorf("%s %d: re-render differs", tn, i)
				}
				// Deterministic ids.
				if got2, _ := tmpl.Parse(ids); !slices.Equal(got2.ToolCalls, got.ToolCalls) {
					t.Errorf("%s %d: Parse not deterministic", tn, i)
				}
			}
		}
	}
}

func TestParseMalformed(t *testing.T) {
	tok := qwen3(t)
	tmpl := mustChatML(t, tok, ChatMLOptions{})
	tests := []struct {
		name      string
		text      string
		content   string
		reasoning string
		calls     []ToolCall // ids ignored
	}{
		{"bad json", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\n</tool_call>", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\n</tool_call>", "", nil},
		{"no name", "x\n<tool_call>\n{\"arguments\": {}}\n</tool_call>", "x\n<tool_call>\n{\"arguments\": {}}\n</tool_call>", "", nil},
		{"unclosed", "ok\n<tool_call>\n{\"name\": \"f\"", "ok\n<tool_call>\n{\"name\": \"f\"", "", nil},
		{"string args", "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>", "", "", []ToolCall{{Name: "f", Arguments: `{"a": 1}`}}},
		{"no args", "<tool_call>{\"name\": \"f\"}</tool_call>", "", "", []ToolCall{{Name: "f", Arguments: `{}`}}},
		{"bad then good", "<tool_call>nope</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>", "<tool_call>nope</tool_call>", "", []ToolCall{{Name: "g", Arguments: `{}`}}},
		{"trailing text", "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>\nand more", "\nand more", "", []ToolCall{{Name: "g", Arguments: `{}`}}},
		{"think without open", "reasoning here\n</think>\n\nanswer", "answer", "reasoning here", nil},
		{"two json values", "<tool_call>{\"name\": \"f\"} {\"name\": \"g\"}</tool_call>", "<tool_call>{\"name\": \"f\"} {\"name\": \"g\"}</tool_call>", "", nil},
	}
	for _, tt := range tests {
		ids := append(tok.Encode(tt.text), tmpl.imEnd, 42, 43) // ids after the stop are ignored
		got, err := tmpl.Parse(ids)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		for i := range got.ToolCalls {
			got.ToolCalls[i].ID = ""
		}
		if got.Content != tt.content || got.Reasoning != tt.reasoning || !slices.Equal(got.ToolCalls, tt.calls) {
			t.Errorf("%s:\n got %+v\nwant content=%q reasoning=%q calls=%+v", tt.name, got, tt.content, tt.reasoning, tt.calls)
		}
	}
	// Random ids never crash Parse.
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200; i++ {
		ids := make([]int32, rng.IntN(40))
		for j := range ids {
			ids[j] = int32(rng.IntN(tok.VocabSize() + 10))
		}
		if _, err := tmpl.Parse(ids); err != nil {
			t.Fatal(err)
		}
	}
}

func TestToolCallIDOption(t *testing.T) {
	n := 0
	tmpl := mustChatML(t, byteTok(t), ChatMLOptions{ToolCallID: func(_ []int32, i int) string { n++; return "id" + string(rune('a'+n)) }})
	m, _ := tmpl.Parse(tmpl.tok.Encode("<tool_call>{\"name\": \"f\"}</tool_call><tool_call>{\"name\": \"g\"}</tool_call>"))
	if len(m.ToolCalls) != 2 || m.ToolCalls[0].ID != "idb" || m.ToolCalls[1].ID != "idc" {
		t.Fatalf("ids from option: %+v", m.ToolCalls)
	}
	w := tmpl.WithToolCallID(func(_ []int32, i int) string { return "w" + string(rune('0'+i)) })
	m, _ = w.Parse(w.tok.Encode("<tool_call>{\"name\": \"f\"}</tool_call>"))
	if len(m.ToolCalls) != 1 || m.ToolCalls[0].ID != "w0" {
		t.Fatalf("WithToolCallID: %+v", m.ToolCalls)
	}
	if m, _ = tmpl.WithToolCallID(nil).Parse(w.tok.Encode("<tool_call>{\"name\": \"f\"}</tool_call>")); !strings.HasPrefix(m.ToolCalls[0].ID, "call_") {
		t.Fatalf("default id: %+v", m.ToolCalls)
	}
}

func TestRenderErrors(t *testing.T) {
	tmpl := mustChatML(t, byteTok(t), ChatMLOptions{})
	call := []ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}}
	tests := []struct {
		name string
		c    Conversation
		want string
	}{
		{"unknown role", Conversation{Messages: []Message{{Role: "developer", Content: "x"}}}, "unknown role"},
		{"no role", Conversation{Messages: []Message{{Content: "x"}}}, "no role"},
		{"tool first", Conversation{Messages: []Message{{Role: RoleTool, Content: "x"}}}, "does not follow"},
		{"tool after text reply", Conversation{Messages: []Message{{Role: RoleUser}, {Role: RoleAssistant, Content: "hi"}, {Role: RoleTool, Content: "x"}}}, "does not follow"},
		{"tool after user", Conversation{Messages: []Message{{Role: RoleUser}, {Role: RoleTool, Content: "x"}}}, "does not follow"},
		{"unknown call id", Conversation{Messages: []Message{{Role: RoleAssistant, ToolCalls: call}, {Role: RoleTool, ToolCallID: "zz"}}}, "matches no tool call"},
		{"too many results", Conversation{Messages: []Message{{Role: RoleAssistant, ToolCalls: call}, {Role: RoleTool}, {Role: RoleTool}}}, "more tool results"},
		{"bad args", Conversation{Messages: []Message{{Role: RoleAssistant, ToolCalls: []ToolCall{{Name: "f", Arguments: "{oops"}}}}}, "not valid JSON"},
		{"bad call name", Conversation{Messages: []Message{{Role: RoleAssistant, ToolCalls: []ToolCall{{Name: `a"b`}}}}}, "invalid tool name"},
		{"empty call name", Conversation{Messages: []Message{{Role: RoleAssistant, ToolCalls: []ToolCall{{Arguments: "{}"}}}}}, "invalid tool name"},
		{"user with calls", Conversation{Messages: []Message{{Role: RoleUser, ToolCalls: call}}}, "cannot carry"},
		{"assistant with call id", Conversation{Messages: []Message{{Role: RoleAssistant, ToolCallID: "x"}}}, "cannot carry"},
		{"bad tool params", Conversation{Tools: []Tool{{Name: "f", Parameters: json.RawMessage(`{`)}}}, "not valid JSON"},
		{"bad tool name", Conversation{Tools: []Tool{{Name: ""}}}, "invalid name"},
	}
	for _, tt := range tests {
		_, err := tmpl.Render(tt.c, true)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
	c := toolConversation()
	for _, from := range []int{0, 1, 2, len(c.Messages) + 1} {
		if _, err := tmpl.RenderSuffix(c, from); err == nil {
			t.Errorf("RenderSuffix(from=%d) accepted", from)
		}
	}
}

func TestCompactTools(t *testing.T) {
	tmpl := mustChatML(t, byteTok(t), ChatMLOptions{CompactTools: true})
	c := Conversation{
		Tools: []Tool{
			{Name: "get_weather", Description: "Get the\n weather.", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]},"days":{"type":"array","items":{"type":"integer"}},"x":{"type":["string","null"]},"any":{}},"required":["city"]}`)},
			{Name: "now"},
		},
		Messages: []Message{{Role: RoleSystem, Content: "Be brief."}, {Role: RoleUser, Content: "hi"}},
	}
	ids, err := tmpl.Render(c, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nBe brief.\n\n# Tools\n" +
		"get_weather(city: string, unit?: \"c\"|\"f\", days?: integer[], x?: string|null, any?: any) - Get the weather.\n" +
		"now()<|im_end|>\n" +
		"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
	if got := tmpl.tok.Decode(ids); got != want {
		t.Errorf("compact render:\n got %q\nwant %q", got, want)
	}
}

func TestDisableThinking(t *testing.T) {
	tmpl := mustChatML(t, qwen3(t), ChatMLOptions{DisableThinking: true})
	ids, err := tmpl.Render(Conversation{Messages: []Message{{Role: RoleUser, Content: "hi"}}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := tmpl.tok.Decode(ids); !strings.HasSuffix(got, "<|im_start|>assistant\n<think>\n\n</think>\n\n") {
		t.Errorf("generation prompt: %q", got)
	}
}

// TestRenderMasked checks that exactly the reply tokens are marked.
func TestRenderMasked(t *testing.T) {
	for tn, tok := range map[string]tokenizer.Tokenizer{"byte": byteTok(t), "qwen3": qwen3(t)} {
		tmpl := mustChatML(t, tok, ChatMLOptions{})
		c := toolConversation()
		ids, mask, err := tmpl.RenderMasked(c)
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := tmpl.Render(c, false)
		if !slices.Equal(ids, plain) || len(mask) != len(ids) {
			t.Fatalf("%s: masked render differs from Render or mask length %d != %d", tn, len(mask), len(ids))
		}
		// Qwen3's template: reasoning shown after the last user query
		// only, and a think block (empty here) on the final reply.
		var want, got []int32
		lq := lastQuery(c.Messages)
		for i, m := range c.Messages {
			if m.Role == RoleAssistant {
				show := i > lq && (m.Reasoning != "" || i == len(c.Messages)-1)
				want = append(append(want, tok.Encode(replyBody(m.Reasoning, show, m.Content, m.ToolCalls))...), tmpl.imEnd)
			}
		}
		for i, on := range mask {
			if on {
				got = append(got, ids[i])
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: masked tokens %q, want %q", tn, tok.Decode(got), tok.Decode(want))
		}
	}
}

func TestStopIDs(t *testing.T) {
	tok := qwen3(t)
	tmpl := mustChatML(t, tok, ChatMLOptions{})
	end, _ := tok.TokenID("<|im_end|>")
	eot, _ := tok.TokenID("<|endoftext|>")
	if got := tmpl.StopIDs(); !slices.Equal(got, []int32{end, eot}) || tmpl.EndOfTurnID() != end {
		t.Errorf("StopIDs %v, want [%d %d]", got, end, eot)
	}
	if _, err := NewChatML(mustLoad(t, filepath.Join(fixtureDir, "llama3", "tokenizer.json")), ChatMLOptions{}); err == nil {
		t.Error("ChatML over Llama 3's tokenizer (no <|im_start|>) accepted")
	}
}

func mustLoad(tb testing.TB, path string) tokenizer.Tokenizer {
	tb.Helper()
	tok, err := tokenizer.LoadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	small, err := NewSmall()
	if err != nil {
		t.Fatal(err)
	}
	if err := SaveDir(dir, small.Tokenizer(), Config{Template: TemplateChatMLCompact}); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := toolConversation()
	a, _ := small.Render(c, true)
	b, err := loaded.Render(c, true)
	if err != nil || !slices.Equal(a, b) {
		t.Fatalf("loaded template renders differently (err %v)", err)
	}
	lc, ok := loaded.(*ChatML)
	if !ok {
		t.Fatalf("loaded %T, want *ChatML", loaded)
	}
	if _, ok := lc.Tokenizer().(*tokenizer.Byte); !ok || !lc.opts.CompactTools {
		t.Errorf("loaded %T compact=%v", lc.Tokenizer(), lc.opts.CompactTools)
	}
	// Hugging Face directories without agl_chat.json: inferred.
	q, err := LoadDir(filepath.Join(fixtureDir, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	if qc, ok := q.(*ChatML); !ok || qc.opts.CompactTools {
		t.Errorf("qwen3 dir got %T %+v", q, q)
	}
	l, err := LoadDir(filepath.Join(fixtureDir, "llama3"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.(*Llama3); !ok {
		t.Errorf("llama3 dir got %T", l)
	}
	// A tokenizer with neither ChatML nor Llama 3 tokens.
	other := t.TempDir()
	bt, _ := tokenizer.NewByte("<s>", "</s>")
	if err := bt.Save(filepath.Join(other, tokenizer.FileName)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(other); err == nil || !strings.Contains(err.Error(), ConfigFileName) {
		t.Errorf("dir without template tokens: %v", err)
	}
	if err := SaveConfig(other, Config{Template: TemplateLlama3}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(other); err == nil {
		t.Error("llama3 template over a tokenizer without its tokens accepted")
	}
	if err := SaveConfig(dir, Config{Template: "jinja"}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir); err == nil {
		t.Error("unknown template name accepted")
	}
	if err := SaveDir(dir, qwen3(t), Config{}); err == nil {
		t.Error("SaveDir of a BPE tokenizer accepted")
	}
}

func TestPyJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":[true,false,null,"x\ny\"\u0001é"],"c":{}}`, `{"b": 1, "a": [true, false, null, "x\ny\"\u0001é"], "c": {}}`},
		{` [ ] `, `[]`},
		{`"<&>"`, `"<&>"`},
		{`1.50`, `1.50`},
	}
	for _, tt := range tests {
		got, err := pyJSON([]byte(tt.in))
		if err != nil || got != tt.want {
			t.Errorf("pyJSON(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{`{`, `{"a":1} x`, ``} {
		if _, err := pyJSON([]byte(bad)); err == nil {
			t.Errorf("pyJSON(%q) accepted", bad)
		}
	}
}

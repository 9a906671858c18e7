package chat

import (
	"testing"

	"github.com/aglrl/agl/tokenizer"
)

// BenchmarkRender renders the multi-turn tool conversation (full render and
// the suffix after the first reply) and parses a tool-call reply.
func BenchmarkRender(b *testing.B) {
	for name, tok := range map[string]tokenizer.Tokenizer{"byte": byteTok(b), "qwen3": qwen3(b)} {
		tmpl := mustChatML(b, tok, ChatMLOptions{})
		c := toolConversation()
		b.Run(name+"/render", func(b *testing.B) {
			for b.Loop() {
				if _, err := tmpl.Render(c, true); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/suffix", func(b *testing.B) {
			for b.Loop() {
				if _, err := tmpl.RenderSuffix(c, 3); err != nil {
					b.Fatal(err)
				}
			}
		})
		reply := replyIDs(tmpl, c.Messages[2])
		b.Run(name+"/parse", func(b *testing.B) {
			for b.Loop() {
				if _, err := tmpl.Parse(reply); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

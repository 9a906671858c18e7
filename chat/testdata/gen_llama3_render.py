"""Renders chat conversations with Llama 3's own Jinja chat template.

Writes llama3_render.jsonl like gen_qwen3_render.py (its template always
ends with the assistant header, so every case has add_generation_prompt).
Llama 3's template (the fixture's) has no tool calling: agl's Llama 3.1-style
tool format cannot be checked against it, so the cases have no tools.
Regenerate: python3 gen_llama3_render.py > llama3_render.jsonl
"""
import json
import sys

from jinja2.sandbox import ImmutableSandboxedEnvironment

cfg = json.load(open("../../../shared/fixtures/tokenizer/llama3/tokenizer_config.json"))
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
tmpl = env.from_string(cfg["chat_template"])

cases = [
    ("system_user", [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi"}]),
    ("user_only", [{"role": "user", "content": "  What is 2+2?\n"}]),
    ("multi_turn", [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"},
                    {"role": "user", "content": "日本語 😀\n\tindent"}, {"role": "assistant", "content": "ok, got it."},
                    {"role": "user", "content": "bye"}]),
    # Every message is trimmed, assistant replies included.
    ("assistant_whitespace", [{"role": "system", "content": "\n Be brief. \n"},
                              {"role": "user", "content": "hi"}, {"role": "assistant", "content": "\n  hello there \n"},
                              {"role": "user", "content": "\tagain"}]),
    # Llama 3 has no thinking: reasoning is not rendered.
    ("reasoning_not_rendered", [{"role": "user", "content": "2+2?"},
                                {"role": "assistant", "content": "4", "reasoning": "simple"},
                                {"role": "user", "content": "3+3?"}]),
    ("late_system", [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                     {"role": "system", "content": "new rules"}, {"role": "user", "content": "c"}]),
]
def to_hf(m):
    h = {"role": m["role"], "content": m["content"]}
    if m.get("reasoning"):
        h["reasoning_content"] = m["reasoning"]
    return h


for name, msgs in cases:
    text = tmpl.render(messages=[to_hf(m) for m in msgs], bos_token=cfg["bos_token"], add_generation_prompt=True)
    sys.stdout.write(json.dumps({"name": name, "conversation": {"messages": msgs}, "add_generation_prompt": True,
                                 "text": text}, ensure_ascii=False) + "\n")

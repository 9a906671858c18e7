"""Renders every prompt of the token-mode drift test with Qwen3's own Jinja
chat template.

conversation.json is a 10-call tool-calling conversation (tools, system
prompt, parallel calls, tool errors, a second user turn, thinking). For
each assistant message i it renders messages[:i] with
add_generation_prompt=True: the prompt vLLM would build for that call from
the true conversation (the replies as the model generated them, reasoning
included). The template is read from the shared fixture
../../../../shared/fixtures/tokenizer/qwen3/tokenizer_config.json and
rendered as transformers' apply_chat_template does (tojson =
json.dumps(ensure_ascii=False), trim_blocks, lstrip_blocks, loopcontrols).
Regenerate (python3 with jinja2):
    python3 gen_goldens.py > goldens.jsonl
"""
import json
import sys

import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

cfg = json.load(open("../../../../shared/fixtures/tokenizer/qwen3/tokenizer_config.json"))
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
    x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
tmpl = env.from_string(cfg["chat_template"])
conv = json.load(open("conversation.json"))


def to_hf(m):
    h = {"role": m["role"], "content": m.get("content", "")}
    if m.get("reasoning"):
        h["reasoning_content"] = m["reasoning"]
    if m.get("tool_calls"):
        h["tool_calls"] = [{"id": c["id"], "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]}} for c in m["tool_calls"]]
    if m.get("tool_call_id"):
        h["tool_call_id"] = m["tool_call_id"]
    return h


tools = [{"type": "function", "function": t} for t in conv["tools"]]
msgs = [to_hf(m) for m in conv["messages"]]
k = 0
for i, m in enumerate(conv["messages"]):
    if m["role"] != "assistant":
        continue
    text = tmpl.render(messages=msgs[:i], tools=tools, add_generation_prompt=True)
    sys.stdout.write(json.dumps({"call": k, "messages": i, "text": text}, ensure_ascii=False) + "\n")
    k += 1

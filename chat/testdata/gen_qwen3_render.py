"""Renders chat conversations with Qwen3's own Jinja chat template.

Writes qwen3_render.jsonl: {"name", "conversation" (agl chat.Conversation),
"add_generation_prompt", "text"}. The template is read from the shared
fixture ../../../shared/fixtures/tokenizer/qwen3/tokenizer_config.json and
rendered with jinja2 the way transformers' apply_chat_template does
(tojson = json.dumps(ensure_ascii=False), trim_blocks, lstrip_blocks).
Cases with "disable_thinking" are rendered with enable_thinking=False.
Regenerate: python3 gen_qwen3_render.py > qwen3_render.jsonl
"""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

cfg = json.load(open("../../../shared/fixtures/tokenizer/qwen3/tokenizer_config.json"))
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
    x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
tmpl = env.from_string(cfg["chat_template"])

weather = {"name": "get_weather", "description": "Get the current weather in a city.",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "description": "City name"},
               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
               "required": ["city"]}}
search = {"name": "search", "description": "Recherche — 検索 \"quoted\"\nsecond line",
          "parameters": {"type": "object", "properties": {
              "query": {"type": "string"}, "limit": {"type": "integer", "default": 10, "maximum": 1.5e2},
              "tags": {"type": "array", "items": {"type": "string"}}, "strict": {"type": "boolean", "default": False},
              "extra": {"type": ["string", "null"], "default": None}},
              "required": ["query", "limit"]}}
noparams = {"name": "now"}

def call(i, name, args):
    return {"id": f"call_{i}", "name": name, "arguments": args}

cases = [
    ("system_user", {"messages": [{"role": "system", "content": "You are helpful."},
                                  {"role": "user", "content": "Hi"}]}, True),
    ("user_only", {"messages": [{"role": "user", "content": "What is 2+2?"}]}, True),
    ("no_gen", {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                             {"role": "user", "content": "c"}]}, False),
    ("tools_parallel", {"tools": [weather, search], "messages": [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            call(1, "get_weather", "{\"city\": \"Paris\"}"),
            call(2, "get_weather", "{\"city\": \"Tokyo\", \"unit\": \"celsius\"}")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, cloudy"},
        {"role": "tool", "tool_call_id": "call_2", "content": "{\"temp\": 25,\n \"sky\": \"clear\"}"}]}, True),
    ("tools_no_system_reasoning", {"tools": [weather, noparams], "messages": [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": "", "reasoning": "I should call now.", "tool_calls": [call(3, "now", "{}")]},
        {"role": "tool", "content": "12:00"},
        {"role": "assistant", "content": "It is noon.", "reasoning": "Got it.",
         "tool_calls": [call(5, "get_weather", "{\"city\": \"Oslo\"}")]},
        {"role": "tool", "content": "late result"}]}, True),
    ("multi_turn", {"messages": [
        {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"},
        {"role": "user", "content": "  indented\n\ttext  "}, {"role": "assistant", "content": "ok\n\n"},
        {"role": "system", "content": "late system"}, {"role": "user", "content": "日本語 😀"}]}, True),
    ("tools_only_unicode", {"tools": [search], "messages": [
        {"role": "user", "content": "find ü"},
        {"role": "assistant", "content": "", "tool_calls": [call(4, "search", "{\"query\": \"ü\", \"limit\": 3}")]},
        {"role": "tool", "content": "none"}]}, True),
    # Thinking: Qwen3's template drops the reasoning of replies before the
    # last user query, keeps it after; a conversation ending with a reply
    # gets a think block there even without reasoning.
    ("thinking_dropped_before_last_query", {"messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning": "Simple sum."},
        {"role": "user", "content": "and 3+3?"}]}, True),
    ("thinking_kept_after_last_query", {"tools": [weather], "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "content": "", "reasoning": "\nCall the tool.\n", "tool_calls": [call(1, "get_weather", "{\"city\": \"Rome\"}")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "20C"},
        {"role": "assistant", "content": "\n\nChecking more.", "reasoning": "Also Milan.", "tool_calls": [call(2, "get_weather", "{\"city\": \"Milan\"}")]},
        {"role": "tool", "tool_call_id": "call_2", "content": "19C"}]}, True),
    ("ends_with_reply_no_reasoning", {"messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}, False),
    ("ends_with_reply_reasoning", {"messages": [
        {"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", "reasoning": "greet"}]}, False),
    ("inline_think_in_content", {"messages": [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "<think>\nold thought\n</think>\n\nold answer"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "<think>\nnew thought\n</think>\n\nnew answer"}]}, False),
    ("tool_response_user_is_not_a_query", {"tools": [noparams], "messages": [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": "", "reasoning": "call now", "tool_calls": [call(1, "now", "{}")]},
        {"role": "user", "content": "<tool_response>\n12:00\n</tool_response>"}]}, True),
    ("tool_calls_content_newline_only_reasoning", {"tools": [noparams], "messages": [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": "\n", "reasoning": "r", "tool_calls": [call(1, "now", "{}")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}]}, True),
    ("system_only_tools", {"tools": [weather, search, noparams], "messages": [
        {"role": "system", "content": "Sys with tools."}, {"role": "user", "content": "x"}]}, True),
]

nothink = [
    ("nothink_first", {"messages": [{"role": "user", "content": "hi"}]}, True),
    ("nothink_history", {"tools": [noparams], "messages": [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": "", "tool_calls": [call(1, "now", "{}")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
        {"role": "assistant", "content": "Noon."},
        {"role": "user", "content": "thanks"}]}, True),
]

def to_hf(conv):
    msgs = []
    for m in conv["messages"]:
        h = {"role": m["role"], "content": m.get("content", "")}
        if m.get("reasoning"):
            h["reasoning_content"] = m["reasoning"]
        if m.get("tool_calls"):
            h["tool_calls"] = [{"id": c["id"], "type": "function",
                                "function": {"name": c["name"], "arguments": c["arguments"]}} for c in m["tool_calls"]]
        if m.get("tool_call_id"):
            h["tool_call_id"] = m["tool_call_id"]
        msgs.append(h)
    tools = [{"type": "function", "function": t} for t in conv.get("tools", [])] or None
    return msgs, tools

for name, conv, gen in cases:
    msgs, tools = to_hf(conv)
    text = tmpl.render(messages=msgs, tools=tools, add_generation_prompt=gen)
    sys.stdout.write(json.dumps({"name": name, "conversation": conv, "add_generation_prompt": gen,
                                 "text": text}, ensure_ascii=False) + "\n")
# enable_thinking=False (agl: ChatMLOptions.DisableThinking).
for name, conv, gen in nothink:
    msgs, tools = to_hf(conv)
    text = tmpl.render(messages=msgs, tools=tools, add_generation_prompt=gen, enable_thinking=False)
    sys.stdout.write(json.dumps({"name": name, "conversation": conv, "add_generation_prompt": gen,
                                 "disable_thinking": True, "text": text}, ensure_ascii=False) + "\n")

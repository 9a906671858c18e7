#!/usr/bin/env python3
"""A minimal agent harness using only the Python 3 standard library.

It knows nothing about agl but OPENAI_BASE_URL and OPENAI_API_KEY: it runs a
tool-calling loop over Chat Completions, makes one streaming call, and posts
its reward to the events route next to the base URL.
"""
import json
import os
import urllib.request

BASE = os.environ["OPENAI_BASE_URL"].rstrip("/")
KEY = os.environ["OPENAI_API_KEY"]


def post(url, body, stream=False):
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY},
        method="POST",
    )
    resp = urllib.request.urlopen(req, timeout=30)
    if not stream:
        return json.loads(resp.read())
    text = ""
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[len("data: "):]
        if data == "[DONE]":
            break
        for choice in json.loads(data)["choices"]:
            text += choice["delta"].get("content") or ""
    return text


TOOLS = [{
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}]

messages = [{"role": "user", "content": "What is 2 + 3?"}]
for _ in range(5):
    resp = post(BASE + "/chat/completions", {"model": "any", "messages": messages, "tools": TOOLS})
    msg = resp["choices"][0]["message"]
    messages.append(msg)
    calls = msg.get("tool_calls") or []
    if not calls:
        print("final: " + msg["content"])
        break
    for call in calls:
        args = json.loads(call["function"]["arguments"])
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": str(args["a"] + args["b"])})

streamed = post(BASE + "/chat/completions",
                {"model": "any", "stream": True, "messages": [{"role": "user", "content": "Say something."}]},
                stream=True)
print("stream: " + streamed)

events_url = BASE[: -len("/v1")] + "/events" if BASE.endswith("/v1") else BASE + "/events"
post(events_url, {"type": "reward", "data": {"value": 1.0}})
print("reward sent")

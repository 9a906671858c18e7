"""A three-agent harness for the multi-agent training test (urllib only):
the writer names itself by a per-agent base URL, the checker by the
X-Agl-Agent header, the rewriter by its model name (mapped in the config).
The writer's call gets a per-call reward; the outcome goes to the reward
file. Knows nothing of agl beyond the env."""
import json, os, urllib.request

task = json.loads(os.environ["AGL_TASK"])
base = os.environ["OPENAI_BASE_URL"]  # …/r/{rollout}/{attempt}/v1
key = os.environ["OPENAI_API_KEY"]


def chat(url, model, content, headers=None):
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 4}
    h = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
    h.update(headers or {})
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(), headers=h)
    r = json.load(urllib.request.urlopen(req, timeout=60))
    return r["id"], r["choices"][0]["message"]["content"] or ""


wid, draft = chat(base[: -len("/v1")] + "/agents/writer/v1", "agl", "letter " + task["letter"])
_, verdict = chat(base, "agl", "check " + draft, {"X-Agl-Agent": "checker"})
_, final = chat(base, "rewriter-model", "fix " + draft)
ev = {"type": "reward", "data": {"value": 0.5 if task["letter"] in draft else 0.0, "call_id": wid}}
req = urllib.request.Request(os.environ["AGL_EVENTS_URL"], data=json.dumps(ev).encode(),
                             headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
urllib.request.urlopen(req, timeout=60).read()
with open(os.environ["AGL_REWARD_FILE"], "w") as f:
    # Any two different outputs almost surely score differently, so a group
    # of four sampled rollouts has a reward spread to learn from.
    spread = (sum(ord(c) for c in final) % 97) / 97
    f.write("1" if task["letter"] in final else str(round(spread, 4)))

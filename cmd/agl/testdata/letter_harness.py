"""A tiny harness for the end-to-end training test: asks the model for a
letter over OpenAI Chat Completions (urllib only). Reward 1 when the reply
contains the task's letter, else the share of lowercase letters in it, so a
random tiny model already gets rewards that differ within a group. Knows
nothing of agl beyond the env."""
import json, os, urllib.request

task = json.loads(os.environ["AGL_TASK"])
base = os.environ["OPENAI_BASE_URL"]
body = {"model": "agl", "messages": [{"role": "user", "content": "letter " + task["letter"]}], "max_tokens": 6}
req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
reply = json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["message"]["content"] or ""
with open(os.environ["AGL_REWARD_FILE"], "w") as f:
    share = sum(c.islower() for c in reply) / max(len(reply), 1)
    f.write("1" if task["letter"] in reply else str(round(share, 4)))

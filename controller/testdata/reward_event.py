# Posts its reward to AGL_EVENTS_URL with the scoped key (standard library only).
import json, os, urllib.request

req = urllib.request.Request(
    os.environ["AGL_EVENTS_URL"],
    data=json.dumps({"type": "reward", "data": {"value": 1.0}}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"},
    method="POST",
)
with urllib.request.urlopen(req) as r:
    assert r.status == 200, r.status
print("posted")

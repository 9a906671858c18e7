"""A harness run inside the sandbox (sandbox.harness: inside): it reports
what it can see and reach, then runs the task's commands itself."""
import json
import os
import subprocess
import urllib.error
import urllib.request


def call(url, body=None, key=True):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + os.environ.get("OPENAI_API_KEY", "")
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return type(e).__name__


task = json.loads(os.environ["AGL_TASK"])
base = os.environ["OPENAI_BASE_URL"]
print("ENV", " ".join(sorted(k for k in os.environ)))
print("CWD", os.getcwd())
print("MODEL", call(base + "/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}))
print("EVENTS", call(base.removesuffix("/v1") + "/events", {"type": "reward", "data": 1}))
print("ADMIN", call("http://127.0.0.1:8642/api/rollouts"))
print("DOTDOT", call(base + "/../../../../api/rollouts"))
print("HOSTGW", call(task["gateway"] + "/api/rollouts"))
for cmd in task.get("cmds", []):
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, timeout=60)
    print(f"$ {cmd}\nexit {p.returncode}\n{p.stdout.decode()[-500:]}{p.stderr.decode()[-500:]}")
# flood_stdout: that many bytes more to stdout ("x"s, then "END\n"), then
# a second's wait, so that the host's log file is seen whole.
if task.get("flood_stdout"):
    import sys
    import time
    chunk = b"x" * (1 << 20)
    left = task["flood_stdout"]
    while left > 0:
        sys.stdout.buffer.write(chunk[:left])
        left -= len(chunk)
    sys.stdout.buffer.write(b"END\n")
    sys.stdout.flush()
    time.sleep(1)
# sleep_s: stay that long before exiting (the door stays open meanwhile).
if task.get("sleep_s"):
    import time
    time.sleep(task["sleep_s"])

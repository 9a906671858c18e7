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
# flood_door: open that many slow model requests (headers, then a body that
# never comes) on the attempt's own route through the forwarder
# (127.0.0.1:8642 in the sandbox), print what each got within 3 s
# ("FLOOD" and a JSON count: "503 too_many_connections", "429
# too_many_requests", "held" for no answer yet, …), then hold them
# flood_hold_s seconds.
if task.get("flood_door"):
    import collections
    import re
    import resource
    import selectors
    import socket
    import time
    import urllib.parse
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    u = urllib.parse.urlparse(base)
    head = (f"POST {u.path}/chat/completions HTTP/1.1\r\nHost: door\r\nAuthorization: Bearer {os.environ['OPENAI_API_KEY']}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{").encode()
    got = collections.Counter()
    socks = []
    for _ in range(task["flood_door"]):
        try:
            s = socket.create_connection((u.hostname, u.port), timeout=5)
            s.sendall(head)
        except OSError as e:
            got["connect: " + type(e).__name__] += 1
            continue
        s.setblocking(False)
        socks.append(s)
    sel = selectors.DefaultSelector()
    data = {}
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
        data[s] = b""
    deadline = time.time() + 3
    while time.time() < deadline:
        for key, _ in sel.select(timeout=max(0, deadline - time.time())):
            try:
                b = key.fileobj.recv(65536)
            except OSError:
                b = b""
            data[key.fileobj] += b
            if not b:
                sel.unregister(key.fileobj)
    for s, b in data.items():
        status = re.match(rb"HTTP/1\.1 (\d+)", b)
        code = re.search(rb'"code":\s*"(\w+)"', b)
        if status is None:
            got["held"] += 1
        else:
            got[status.group(1).decode() + " " + (code.group(1).decode() if code else "(no JSON error)")] += 1
    print("FLOOD", json.dumps(got, sort_keys=True), flush=True)
    time.sleep(task.get("flood_hold_s", 0))
    for s in socks:
        s.close()

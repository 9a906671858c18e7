"""A mini-swe-agent-style coding harness: the model answers with one ```bash
block per turn, the command runs in the attempt's sandbox, its output
(truncated) is the next user message, and the command `submit` ends the
run. Python 3 standard library only; it knows nothing of agl beyond the
environment the controller sets:

    OPENAI_BASE_URL, OPENAI_API_KEY   the model (any OpenAI-compatible server)
    AGL_TASK                          {"id", "problem_statement", "max_turns"?, ...}
    AGL_SANDBOX_EXEC                  "$AGL_SANDBOX_EXEC" bash -c CMD runs CMD in the sandbox

The reward is not the harness's business: agl runs the task's hidden tests
on the final workspace. Without AGL_SANDBOX_EXEC the harness refuses to run
(it never runs the model's commands unsandboxed); `--unsafe-local DIR` runs
them with bash in DIR instead, for trying a task by hand on a throwaway copy.

Environment knobs: SWE_MAX_TURNS (default 8, the task's max_turns wins),
SWE_MAX_TOKENS (per reply, default 64), SWE_CMD_TIMEOUT (seconds, default 20).
"""
import json, os, re, subprocess, sys, urllib.error, urllib.request

SYSTEM = "Fix the bug."
OBS_LIMIT = 400  # characters of command output shown to the model
BLOCK = re.compile(r"```bash\n(.*?)\n?```", re.S)
FORMAT_ERROR = "Format error: reply with exactly one ```bash block."


def truncate(out):
    """The observation of a command's output: head and tail when long."""
    out = out.replace("\r", "")
    if len(out) <= OBS_LIMIT:
        return out
    half = OBS_LIMIT // 2
    return out[:half] + "\n[... %d characters cut ...]\n" % (len(out) - 2 * half) + out[-half:]


def observation(status, out):
    """What the model sees after a command: its output and a non-zero status."""
    text = truncate(out).rstrip("\n")
    if status != 0:
        text += ("\n" if text else "") + "(exit %d)" % status
    return text or "(no output)"


def action(reply):
    """The command of a reply, or None when it is not exactly one bash block."""
    blocks = BLOCK.findall(reply or "")
    if len(blocks) != 1 or not blocks[0].strip():
        return None
    return blocks[0].strip()


def reply_text(cmd):
    """How a command is written as the assistant's reply (demonstrations too)."""
    return "```bash\n%s\n```" % cmd


def chat(messages, max_tokens):
    body = {"model": os.environ.get("MODEL", "agl"), "messages": messages, "max_tokens": max_tokens}
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")})
    try:
        return json.load(urllib.request.urlopen(req, timeout=300))["choices"][0]["message"].get("content") or ""
    except urllib.error.HTTPError as e:
        # e.g. the gateway's per-attempt cap on calls or tokens: the run ends.
        raise SystemExit("harness: model call refused: %d %s" % (e.code, e.read()[:300].decode("utf-8", "replace")))


def runner(argv):
    """How a command runs: in the sandbox, or (explicitly) in a local dir."""
    timeout = float(os.environ.get("SWE_CMD_TIMEOUT", "20"))
    if len(argv) == 2 and argv[0] == "--unsafe-local":
        workdir = argv[1]
        prefix = ["bash", "-c"]
    elif not argv and os.environ.get("AGL_SANDBOX_EXEC"):
        workdir = None
        prefix = [os.environ["AGL_SANDBOX_EXEC"], "bash", "-c"]
    else:
        raise SystemExit("harness: AGL_SANDBOX_EXEC is not set: refusing to run the model's commands "
                         "outside a sandbox (use --unsafe-local DIR on a throwaway copy to try by hand)")

    def run(cmd):
        try:
            p = subprocess.run(prefix + [cmd], cwd=workdir, capture_output=True, timeout=timeout + 5)
            return p.returncode, (p.stdout + p.stderr).decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            return 124, "timeout after %ds" % timeout
    return run


def main(argv):
    run = runner(argv)
    task = json.loads(os.environ["AGL_TASK"])
    max_turns = int(task.get("max_turns") or os.environ.get("SWE_MAX_TURNS", "8"))
    max_tokens = int(os.environ.get("SWE_MAX_TOKENS", "64"))
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["problem_statement"]}]
    for turn in range(max_turns):
        reply = chat(messages, max_tokens)
        messages.append({"role": "assistant", "content": reply})
        cmd = action(reply)
        if cmd is None:
            obs = FORMAT_ERROR
        elif cmd == "submit":
            print("harness: submitted after %d turns" % (turn + 1))
            return
        else:
            status, out = run(cmd)
            obs = observation(status, out)
        print("$ %s\n%s" % (cmd if cmd is not None else "(no command)", obs), flush=True)
        messages.append({"role": "user", "content": obs})
    print("harness: out of turns (%d) without submit" % max_turns)


if __name__ == "__main__":
    main(sys.argv[1:])

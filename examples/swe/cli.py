"""Runs Codex or Claude Code as the harness of a repository task (shape
`harness: inside`: the controller runs this whole command inside the
attempt's sandbox, cwd = the workspace, with only the attempt's gateway
routes reachable). Python 3 standard library only.

    python3 cli.py codex|claude

It gives the CLI the task's problem statement and lets it work in the
current directory; the reward is the hidden tests' verdict, as with
harness.py. The CLI comes from AGL_CLIS_DIR (default: the repository's
.cache/npm-clis, installed by scripts/install-clis.sh), which the sandbox
must bind read-only (controller.sandbox.read_only).
"""
import json, os, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = "%s\n\nFix the bug in the files of the current directory. The tests are hidden; use the reproduction command."


def main(which):
    task = json.loads(os.environ["AGL_TASK"])
    prompt = PROMPT % task["problem_statement"]
    clis = os.environ.get("AGL_CLIS_DIR") or os.path.join(HERE, "..", "..", ".cache", "npm-clis")
    bin_ = os.path.join(clis, "node_modules", ".bin", which)
    home = tempfile.mkdtemp(prefix="cli-home-")
    env = dict(os.environ, HOME=home)
    turns = str(task.get("max_turns") or 8)
    if which == "codex":
        codex_home = os.path.join(home, ".codex")
        os.makedirs(codex_home, mode=0o700)
        with open(os.path.join(codex_home, "config.toml"), "w") as f:
            f.write('model = "agl"\nmodel_provider = "agl"\n[model_providers.agl]\nname = "agl"\n'
                    'base_url = "%s"\nwire_api = "responses"\nenv_key = "OPENAI_API_KEY"\n'
                    'request_max_retries = 0\nstream_max_retries = 0\n[analytics]\nenabled = false\n'
                    % os.environ["OPENAI_BASE_URL"])
        env["CODEX_HOME"] = codex_home
        argv = [bin_, "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", prompt]
    elif which == "claude":
        env.update(CLAUDE_CONFIG_DIR=os.path.join(home, ".claude"), DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1",
                   DISABLE_ERROR_REPORTING="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
        argv = [bin_, "-p", prompt, "--output-format", "stream-json", "--verbose", "--max-turns", turns, "--allowedTools", "Bash"]
    else:
        raise SystemExit("cli.py: want codex or claude, got %r" % which)
    os.execve(bin_, argv, env)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python3 cli.py codex|claude")
    main(sys.argv[1])

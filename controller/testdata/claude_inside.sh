#!/bin/sh
# Claude Code as the harness, inside the sandbox (sandbox.harness: inside).
set -e
prompt=$(python3 -c 'import json, os; print(json.loads(os.environ["AGL_TASK"])["problem_statement"])')
exec "$AGL_CLAUDE" -p "$prompt" --output-format stream-json --verbose --max-turns 4 --allowedTools Bash

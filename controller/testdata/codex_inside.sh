#!/bin/sh
# Codex as the harness, inside the sandbox (sandbox.harness: inside): its
# provider is the attempt's gateway route the controller set.
set -e
export CODEX_HOME="$HOME/.codex"
mkdir -p "$CODEX_HOME"
cat > "$CODEX_HOME/config.toml" <<TOML
model = "agl-test"
model_provider = "agl"
[model_providers.agl]
name = "agl"
base_url = "$OPENAI_BASE_URL"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
request_max_retries = 0
stream_max_retries = 0
[analytics]
enabled = false
TOML
prompt=$(python3 -c 'import json, os; print(json.loads(os.environ["AGL_TASK"])["problem_statement"])')
exec "$AGL_CODEX" exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "$prompt"

#!/usr/bin/env bash
# Installs the pinned harness CLIs the real-CLI tests run (proxy's
# TestClaudeCodeCLI, TestCodexCLI, TestGeminiCLI, TestOpenCodeCLI and
# TestQwenCodeCLI): @anthropic-ai/claude-code, @openai/codex,
# @google/gemini-cli, opencode-ai (with @opencode-ai/plugin, which OpenCode
# would otherwise fetch into its config directory at startup) and
# @qwen-code/qwen-code, exactly as locked in scripts/clis/package-lock.json,
# into .cache/npm-clis/ (ignored by git). Their native binaries come inside
# the npm packages (platform packages; Qwen Code brings its own ripgrep);
# nothing else is downloaded. Does nothing when the installed versions
# already match the lock.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.cache/npm-clis
mkdir -p "$dest"
if cmp -s scripts/clis/package-lock.json "$dest/package-lock.json" &&
	[ -x "$dest/node_modules/.bin/claude" ] && [ -x "$dest/node_modules/.bin/codex" ] &&
	[ -x "$dest/node_modules/.bin/gemini" ] && [ -x "$dest/node_modules/.bin/opencode" ] &&
	[ -x "$dest/node_modules/.bin/qwen" ]; then
	exit 0
fi
cp scripts/clis/package.json scripts/clis/package-lock.json "$dest/"
# Claude Code's postinstall copies its platform binary over the bin stub.
(cd "$dest" && npm ci --no-audit --no-fund --loglevel=error)
"$dest/node_modules/.bin/claude" --version
"$dest/node_modules/.bin/codex" --version
"$dest/node_modules/.bin/gemini" --version
"$dest/node_modules/.bin/opencode" --version
"$dest/node_modules/.bin/qwen" --version

#!/bin/sh
# Writes its reward to AGL_REWARD_FILE and prints the env contract.
echo "base=$OPENAI_BASE_URL"
echo "anthropic=$ANTHROPIC_BASE_URL"
echo "key=$OPENAI_API_KEY"
echo "akey=$ANTHROPIC_API_KEY"
echo "task=$AGL_TASK"
echo "events=$AGL_EVENTS_URL"
echo "ids=$AGL_ROLLOUT_ID/$AGL_ATTEMPT_ID mode=$AGL_MODE"
echo "admin=${AGL_ADMIN_KEY:-none} extra=$EXTRA"
echo "pwd=$(pwd)"
echo "to stderr" >&2
echo 0.75 > "$AGL_REWARD_FILE"

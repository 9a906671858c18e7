#!/bin/sh
# Writes its reward to AGL_REWARD_FILE and prints the env contract.
echo "base=$OPENAI_BASE_URL"
echo "anthropic=$ANTHROPIC_BASE_URL"
echo "key=$OPENAI_API_KEY"
echo "akey=$ANTHROPIC_API_KEY"
echo "gemini=$GOOGLE_GEMINI_BASE_URL"
echo "gkey=$GEMINI_API_KEY"
echo "google=${GOOGLE_API_KEY:-none}"
echo "task=$AGL_TASK"
echo "events=$AGL_EVENTS_URL"
echo "ids=$AGL_ROLLOUT_ID/$AGL_ATTEMPT_ID mode=$AGL_MODE"
echo "admin=${AGL_ADMIN_KEY:-none} extra=$EXTRA"
echo "store=${AGL_STORE_URL:-none} token=${ANTHROPIC_AUTH_TOKEN:-none}"
echo "pwd=$(pwd)"
echo "to stderr" >&2
# Proves the key works for this attempt: an event posted with it.
python3 -c '
import json, os, urllib.request
req = urllib.request.Request(os.environ["AGL_EVENTS_URL"], data=json.dumps({"type": "key_check", "data": 1}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "x-api-key": os.environ["ANTHROPIC_API_KEY"], "x-goog-api-key": os.environ["GEMINI_API_KEY"]}, method="POST")
urllib.request.urlopen(req).read()
'
echo 0.75 > "$AGL_REWARD_FILE"

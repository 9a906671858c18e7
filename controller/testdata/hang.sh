#!/bin/sh
# Ignores SIGTERM and leaves a grandchild: only killing the whole process
# group with SIGKILL ends both. Writes the pids to $PID_DIR.
trap '' TERM
sleep 30 &
echo $! > "$PID_DIR/$AGL_ATTEMPT_ID.grandchild"
echo $$ > "$PID_DIR/$AGL_ATTEMPT_ID.harness"
echo "hanging"
wait

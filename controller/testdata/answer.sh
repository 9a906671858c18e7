#!/bin/sh
echo "thinking"
echo "answer 42"

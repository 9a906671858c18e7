#!/bin/sh
echo "working" >&2
echo "boom: division by zero" >&2
exit 3

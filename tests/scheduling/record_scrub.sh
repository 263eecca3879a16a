#!/bin/sh
# A scrub command for tests: appends its arguments after the first (the log
# file) to that file as one line, so a test sees every call and what it was
# given.
log="$1"
shift
printf '%s\n' "$*" >> "$log"

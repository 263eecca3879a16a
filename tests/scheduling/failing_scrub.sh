#!/bin/sh
# A scrub command for tests that fails the way a refused GPU reset does.
echo "resetting GPU $1"
echo "reset refused: the GPU is in use" >&2
exit 3

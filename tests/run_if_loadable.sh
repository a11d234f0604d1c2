#!/bin/sh
# Runs a GPU test binary that links the CUDA driver, or reports it skipped (exit 77, CTest's
# SKIP_RETURN_CODE) where the driver library is absent and the binary cannot even load.
missing=$(ldd "$1" 2>/dev/null | grep 'not found')
if [ -n "$missing" ]; then
  echo "*** $(basename "$1") SKIPPED: cannot load without $(echo "$missing" | awk '{print $1}' | tr '\n' ' ')***"
  exit 77
fi
exec "$@"

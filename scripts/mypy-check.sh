#!/usr/bin/env bash
# mypy over probe, engines and app.py: no file may have an error. MYPY overrides the command (e.g. a mypy outside
# the venv).
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a mypy <<<"${MYPY:-.venv/bin/python -m mypy}"
rc=0
out=$("${mypy[@]}" probe engines app.py --ignore-missing-imports 2>&1) || rc=$?
if [ "$rc" -gt 1 ]; then # 1: errors found; anything else: mypy itself failed
  printf '%s\n' "$out"
  echo "mypy-check: mypy exited with $rc" >&2
  exit 2
fi
errors=$(printf '%s\n' "$out" | grep -c ': error: ' || true)
if [ "$errors" -gt 0 ]; then
  printf '%s\n' "$out" | grep ': error: ' >&2
  echo "mypy-check: $errors error(s); probe, engines and app.py take none" >&2
  exit 1
fi
echo "mypy-check: 0 errors"

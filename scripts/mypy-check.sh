#!/usr/bin/env bash
# mypy over probe, engines and app.py. Fails when app.py or a file in engines/, probe/analysis/ or probe/explorer/
# has an error, or when any other file has more errors than its line in .ci/mypy-baseline.txt (`path count`; a file not
# listed may have none).
# Fewer is fine, and said, so the baseline can shrink. MYPY overrides the command (e.g. a mypy outside the venv).
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
printf '%s\n' "$out" | python3 -c '
import collections, sys

STRICT = ("app.py", "engines/", "probe/analysis/", "probe/explorer/")
PENDING: set[str] = set()  # files of the strict folders held to the baseline for a while (none now)
lines = [line for line in sys.stdin.read().splitlines() if ": error: " in line]
found = collections.Counter(line.split(":", 1)[0] for line in lines)
baseline = {}
for line in open(".ci/mypy-baseline.txt", encoding="utf-8"):
    if line.strip():
        path, count = line.split()
        baseline[path] = int(count)
failed = []
for path in sorted(found.keys() | baseline.keys()):
    n, allowed = found[path], baseline.get(path, 0)
    if path.startswith(STRICT) and path not in PENDING and n:
        failed.append(f"{path}: {n} error(s); app.py, engines/, probe/analysis/ and probe/explorer/ take none")
    elif n > allowed:
        failed.append(f"{path}: {n} error(s), baseline {allowed}")
    elif n < allowed:
        print(f"baseline can shrink: {path} {allowed} -> {n}")
for message in failed:
    print(f"mypy-check: {message}", file=sys.stderr)
if failed:
    bad = {m.split(":", 1)[0] for m in failed}
    print("\n".join(line for line in lines if line.split(":", 1)[0] in bad), file=sys.stderr)
    sys.exit(1)
print(f"mypy-check: {sum(found.values())} error(s), none past the baseline")
'

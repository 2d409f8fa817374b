#!/usr/bin/env bash
# Wall time of `probe --help`, `probe analyze --help` and a few more, each in a fresh process, median of 5, beside
# `python -c "import numpy"` (this machine's speed at the moment: a loaded machine is slower at everything).
# Usage: scripts/cli-timings.sh [CHECKOUT ...]   (default: this one; several: interleaved, so each sees the same load)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
trees=("$@")
[ ${#trees[@]} -gt 0 ] || trees=("$PWD")
median() { sort -n | sed -n 3p; }
run() { # tree, then the command's words
  local tree=$1
  shift
  local s e
  s=$(date +%s.%N)
  (cd "$tree" && PYTHONPATH="$tree" "$PY" "$@" >/dev/null 2>&1) || true
  e=$(date +%s.%N)
  echo "$e - $s" | bc
}
declare -A times
cases=("-c|import numpy" "-m|probe|--help" "-m|probe|analyze|--help" "-m|probe|compare|--help" "-m|probe|run|--help")
for _ in 1 2 3 4 5; do
  for c in "${cases[@]}"; do
    IFS='|' read -r -a words <<<"$c"
    for tree in "${trees[@]}"; do
      times["$tree|$c"]+="$(run "$tree" "${words[@]}") "
    done
  done
done
for c in "${cases[@]}"; do
  for tree in "${trees[@]}"; do
    printf '%-28s %-36s %6.3f s  (%s)\n' "${c//|/ }" "$tree" \
      "$(tr ' ' '\n' <<<"${times["$tree|$c"]}" | grep . | median)" "${times["$tree|$c"]% }"
  done
done

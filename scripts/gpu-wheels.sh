#!/usr/bin/env bash
# Here, where pip reaches PyPI: download the wheels `probe run --quick` needs on the GPU machine and its image lacks,
# into .whl/ (git-ignored), for scripts/gpu-run.sh to install there (it has no network). The machine: Python 3.12,
# x86-64 (manylinux), with torch 2.11, transformers 5.17, numpy, pandas, pyarrow, scipy, rich, psutil, tabulate and
# nvidia-ml-py (pynvml) already installed. Of probe's dependencies (pyproject.toml) that leaves:
#   msgspec   the trace reader, results and report files, --json: every command needs it
#   nvtx      NVTX ranges for Nsight Systems (<0.2.12, see DEVELOPERS.md); optional, small, carried for nsys runs
#   google-re2  user patterns (--steps, --part, --kernel-category) in linear time (probe/analysis/ledger/patterns.py)
# Not carried: duckdb (the run history: gpu-run.sh runs with --no-history, which never imports it, and its wheel is a
# third of the 64 MiB a call may carry), plotly and streamlit (the explorer), ray (--executor ray).
# Usage: scripts/gpu-wheels.sh            (then name .whl in the device call's carry)
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=("msgspec==0.22.0" "nvtx==0.2.11" "google-re2==1.1.20251105")
PY=${PYTHON:-python3}
mkdir -p .whl
# pip matches manylinux tags exactly: the tags these wheels are published under, newest first.
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 \
  -d .whl "${WHEELS[@]}"
# One version of each: two would stop the whole install there.
for name in msgspec nvtx google_re2; do
  n=$(find .whl -maxdepth 1 -name "${name}-*.whl" | wc -l)
  [ "$n" -eq 1 ] || { echo "gpu-wheels: $n wheels of $name in .whl/, want 1: remove the others" >&2; exit 1; }
done
ls -l .whl/*.whl
echo "gpu-wheels: $(du -ch .whl/*.whl | tail -n 1 | cut -f1) in .whl/; carry .whl and run: bash scripts/gpu-run.sh"

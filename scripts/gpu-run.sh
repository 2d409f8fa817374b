#!/usr/bin/env bash
# On the GPU machine: install the wheels scripts/gpu-wheels.sh brought (.whl/, carried with the call), check the
# imports and that the profiler records kernels, run `probe run --quick`, and pack the run folder into two archives
# under $OUT (what comes back: at most 8 files of 16 MiB). A flushed line a phase, with the seconds since the start,
# so a log read halfway says where the run is. Under 7 minutes by docs/gpu/README.md's estimate.
#
#   device command:  bash scripts/gpu-run.sh          carry: [".whl"]
#
# $OUT:               where the archives and the log go (the device tool sets it)
# GPU_RUN_SITE        the --target folder the wheels go into (default /tmp/probe-site)
# GPU_RUN_ARGS        extra `probe run` flags (default none; e.g. --no-next)
# PYTHON              the interpreter that holds torch (default python3)
# Exit status: probe run's (0, or 1 when a cell, a part or a kernel count failed; report.md says which); 2 when $OUT
# cannot be written (checked first: nothing is installed or run), or the install or the imports fail; 3 when packing
# failed (a tar or gzip exited non-zero, or run.tar.gz is not in $OUT: the results did not come back), whatever probe
# run's was. Every failure is one line `gpu-run: FAILED ...` naming the step.
set -uo pipefail # not -e: a run that fails must still pack what it wrote; each step checks its own status
cd "$(dirname "$0")/.."
start=$(date +%s)
phase() { echo "gpu-run: $1 (+$(($(date +%s) - start)) s)"; }
OUT=${OUT:?set OUT to the folder whose files come back}
SITE=${GPU_RUN_SITE:-/tmp/probe-site}
PY=${PYTHON:-python3}
RUN=runs/gpu-quick
TRACES_MAX=$((15 * 1024 * 1024)) # the traces archive stays under the 16 MiB a returned file may hold
export PYTHONUNBUFFERED=1
# $OUT first, with a byte written (a full disk takes an empty file): a run whose results cannot come back is not run
if ! { mkdir -p "$OUT" && echo "gpu-run: writing to $OUT" >"$OUT/gpu-run.log"; } 2>/dev/null; then
  echo "gpu-run: FAILED: \$OUT=$OUT is not a folder this user can write to: nothing installed or run" >&2
  exit 2
fi
exec > >(tee "$OUT/gpu-run.log") 2>&1 # the whole log comes back too, whatever the tail shows

phase "installing $(ls .whl/*.whl 2>/dev/null | wc -l) wheels into $SITE"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl ||
  { phase "FAILED: the wheels did not install"; exit 2; }
export PYTHONPATH="$SITE:$PWD"

phase "self-check: imports, and the profiler's kernels before and after a run's sessions"
"$PY" - <<'EOF' || { phase "FAILED: the self-check could not run"; exit 2; }
import json, os, sys
import msgspec, torch, transformers
from engines.models import resolve_device
from probe.capture.pipeline import profiled_engines, sessions_in_run, QUICK, RunOptions
from probe.capture.config import BenchConfig
from probe.capture.profile import prepare_graph_profiling, self_check

print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}), transformers "
      f"{transformers.__version__}, msgspec {msgspec.__version__}; GPU: "
      f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}", flush=True)
device = resolve_device("auto")
prepare_graph_profiling(device)
engines = profiled_engines(BenchConfig(engines=QUICK["engines"]), RunOptions(quick=True))
check = self_check(device, sessions_in_run(len(engines)))
print(f"self-check: {check.note}; {check.teardown_cupti}", flush=True)
with open(os.path.join(os.environ["OUT"], "self-check.json"), "w") as f:
    json.dump(check.to_json(), f, indent=1)
if check.kernels_lost:
    print("self-check: KERNELS LOST after the sessions: the run's GPU figures will say so", flush=True)
EOF

phase "probe run --quick (its own lines follow: one a part, one a cell)"
rm -rf "$RUN"
# shellcheck disable=SC2086  # GPU_RUN_ARGS is a list of flags
"$PY" -m probe run --quick --no-history --out "$RUN" ${GPU_RUN_ARGS:-} >"$OUT/probe-run.txt" 2>&1 &
pid=$!
tail -n +1 -f "$OUT/probe-run.txt" --pid "$pid" | grep --line-buffered -E "^probe|error|warning|Traceback" &
wait "$pid"
code=$?
phase "probe run exited $code"

phase "packing $RUN into $OUT"
lost="" # the packing steps that failed, "" when none did
packing() { # packing STEP COMMAND...: run it, and note the step when it fails
  local step=$1
  shift
  "$@" || lost="${lost:+$lost; }$step exited $?"
}
if [ -d "$RUN" ]; then
  # 1: everything but the traces themselves (results, report, cells, telemetry, sidecars, next-*): small
  packing "tar of run.tar.gz" \
    tar -czf "$OUT/run.tar.gz" --exclude='*.trace.json.gz' --exclude='*.nsys-rep' --exclude='*.sqlite' "$RUN"
  # 2: the traces, gzipped at a fast level (probe writes its chrome traces at level 1; an nsys export is gzipped
  # here), not compressed again, smallest first while they fit
  packing "gzip of the nsys exports" find "$RUN" -name '*.sqlite' -exec gzip -1 {} +
  : >"$OUT/traces-left-out.txt"
  list=()
  total=0
  while read -r size path; do
    if [ $((total + size)) -le "$TRACES_MAX" ]; then
      list+=("$path")
      total=$((total + size))
    else
      echo "$path ($size bytes): over the archive's limit" >>"$OUT/traces-left-out.txt"
    fi
  done < <(find "$RUN" \( -name '*.trace.json.gz' -o -name '*.sqlite.gz' \) -printf '%s %p\n' | sort -n)
  [ ${#list[@]} -eq 0 ] || packing "tar of traces.tar" tar -cf "$OUT/traces.tar" "${list[@]}"
  [ -s "$OUT/traces-left-out.txt" ] || rm -f "$OUT/traces-left-out.txt"
else
  lost="no run folder $RUN to pack"
fi
[ -s "$OUT/run.tar.gz" ] || lost="${lost:+$lost; }run.tar.gz is not in $OUT"
ls -l "$OUT"
if [ -n "$lost" ]; then
  phase "FAILED packing: $lost (probe run exited $code): exit 3"
  exit 3
fi
phase "done, exit $code"
exit "$code"

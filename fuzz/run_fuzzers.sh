#!/usr/bin/env bash
# Runs the libFuzzer targets of the input readers, each for SECONDS, seeded
# with the shipped files (fuzz/README.md).
#
#   fuzz/run_fuzzers.sh BUILD_DIR SECONDS [TARGET...]
#
# BUILD_DIR was configured with -DTRAINPLAN_FUZZ=ON (clang).  TARGETs are
# model, cluster, plan, calibration, nccl_tests, pipeline_layout (default: all).  The
# corpora grow in BUILD_DIR/fuzz-work/corpus/<target>; a finding (crash,
# sanitizer report, leak, timeout above 10 s, uncaught exception other than
# InputError) is saved as BUILD_DIR/fuzz-work/artifacts/<target>-* and
# makes the script exit 1.  One summary line per target goes to stdout.
# With FUZZ_RUNS=N each target stops after N inputs from seed 1 (CI), or
# after SECONDS, whichever comes first.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
if [ $# -lt 2 ]; then
  echo "usage: fuzz/run_fuzzers.sh BUILD_DIR SECONDS [model|cluster|plan|calibration|nccl_tests|pipeline_layout ...]" >&2
  exit 2
fi
build="$(cd "$1" && pwd)" || { echo "run_fuzzers.sh: no build folder $1" >&2; exit 2; }
seconds="$2"
shift 2
case "$seconds" in ''|*[!0-9]*) echo "run_fuzzers.sh: SECONDS must be a whole number, got \"$seconds\"" >&2; exit 2;; esac
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(model cluster plan calibration nccl_tests pipeline_layout)
work="$build/fuzz-work"
mkdir -p "$work/artifacts"

seeds_of() {
  case "$1" in
    model) ls "$root"/models/*.json "$root"/tests/data/model_*.json ;;
    cluster) ls "$root"/topologies/*.json "$root"/tests/data/cluster_*.json ;;
    plan) ls "$root"/tests/data/export/plan_*.json ;;
    calibration) ls "$root"/tests/data/calibration/*.json ;;
    nccl_tests) ls "$root"/tests/data/nccl/* ;;
    pipeline_layout) ls "$root"/tests/data/layouts/* ;;
  esac
}

export TRAINPLAN_DATA_DIR="$root"
# Leaks are findings too; MPI is never initialised by the readers.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:handle_abort=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
for t in "${targets[@]}"; do
  bin="$build/fuzz/fuzz_$t"
  if [ ! -x "$bin" ]; then echo "run_fuzzers.sh: $bin is not built" >&2; exit 2; fi
  corpus="$work/corpus/$t"
  mkdir -p "$corpus"
  seeds_of "$t" | while read -r f; do cp -n "$f" "$corpus/seed-$(basename "$f")"; done
  log="$work/$t.log"
  # FUZZ_RUNS=N: stop after N inputs with a fixed seed (reproducible, for CI)
  # instead of after SECONDS.
  limit=(-max_total_time="$seconds")
  [ -n "${FUZZ_RUNS:-}" ] && limit=(-runs="$FUZZ_RUNS" -seed=1 -max_total_time="$seconds")
  "$bin" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -dict="$here/json.dict" -artifact_prefix="$work/artifacts/$t-" "$corpus" >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  files=$(ls "$corpus" | wc -l)
  if [ $rc -eq 0 ]; then
    echo "fuzz_$t: ${runs:-0} inputs, coverage ${cov:-0} edges, corpus $files files: no finding"
  else
    echo "fuzz_$t: FINDING after ${runs:-?} inputs (exit $rc); see $log and $work/artifacts/$t-*"
    grep -m3 -E "ERROR: |runtime error|deadly signal|uncaught|Timeout|terminate called" "$log" | sed 's/^/  /'
    status=1
  fi
done
exit $status

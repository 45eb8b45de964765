#!/usr/bin/env bash
# Builds trainplan on one GPU machine, calibrates it and validates single-GPU
# plans of gpt3-1.3b and llama3-8b (tp = pp = dp = 1, mbs 1, 2, 4, seq 2048):
# the predicted-vs-measured table of each, in under 8 minutes.
#
# The machine needs the CUDA toolkit, cuBLAS and NCCL (NCCL and cuBLAS may be
# only the libraries of Python wheels: nvidia/nccl/lib, nvidia/cublas/lib under
# site-packages), CMake >= 3.20, Ninja (or make) and a C++17 compiler; no
# -dev packages and no network.  The header-only dependencies come with the
# source tree in third_party_bundle/ (made by calibrate/bundle_headers.sh on a
# machine that has them).
#
# Usage: calibrate/run_on_gpu.sh [out-dir]
#   out-dir: results (default $OUT, else ./gpu_results): environment.txt,
#   logs/, calibration.json, plans/*.json, validate_*.txt (and .json where
#   validate writes JSON), summary.txt.
# Environment (all optional):
#   TRAINPLAN_BUNDLE_DIR  header bundle (default <repo>/third_party_bundle)
#   TRAINPLAN_CLUSTER     cluster of the plans (default: from the GPU name)
#   BUDGET_S              wall-clock budget of the whole script (default 470)
#   STEPS                 measured steps per validation (default 3)
#   CUDA_HOME, TRAINPLAN_NCCL_LIB, TRAINPLAN_NCCL_INCLUDE   where to look first
#
# Exit status: 0 when the build, the calibration and every validation ran;
# 1 otherwise (what did run is still in out-dir).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-${OUT:-$root/gpu_results}}
mkdir -p "$out/logs" "$out/plans"
out=$(cd "$out" && pwd)
budget=${BUDGET_S:-470}
steps=${STEPS:-3}
t_start=$SECONDS
status=0

say() { echo "[run_on_gpu $((SECONDS - t_start))s] $*"; }
left() { echo $((budget - (SECONDS - t_start))); }
# Seconds for a step: at most `cap`, leaving `reserve` for what follows.
slot() {
  local cap=$1 reserve=$2 l
  l=$(($(left) - reserve))
  ((l > cap)) && l=$cap
  ((l < 5)) && l=5
  echo "$l"
}
# run_logged NAME SECONDS CMD...: runs CMD under a timeout, output to the
# terminal and to logs/NAME.log; returns its status (124: timed out).
run_logged() {
  local name=$1 secs=$2
  shift 2
  say "$name (timeout ${secs}s): $*"
  timeout -k 10 "$secs" "$@" 2>&1 | tee "$out/logs/$name.log"
  local rc=${PIPESTATUS[0]}
  ((rc == 124 || rc == 137)) && say "$name: timed out after ${secs}s"
  ((rc != 0)) && say "$name: exit status $rc"
  return "$rc"
}

# One process, world size 1: nothing of a launcher's environment applies.
unset RANK WORLD_SIZE LOCAL_RANK NCCL_COMM_ID OMPI_COMM_WORLD_SIZE PMI_SIZE PMI_RANK PMIX_RANK SLURM_NTASKS \
  TRAINPLAN_CUDA_DEVICE
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

{
  echo "# run_on_gpu.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "## source: $(cd "$root" && git rev-parse HEAD 2>/dev/null || echo 'not a git checkout')"
  (cd "$root" && git status --short 2>/dev/null | head -50)
  echo "## nvidia-smi"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id,clocks.max.sm --format=csv 2>&1
  echo "## tools"
  cmake --version 2>&1 | head -1
  (ninja --version 2>/dev/null | sed 's/^/ninja /') || echo "ninja: not found"
  "${CXX:-c++}" --version 2>&1 | head -1
  python3 --version 2>&1
  nproc
} >"$out/environment.txt" 2>&1
cat "$out/environment.txt"

# --- CUDA, cuBLAS, NCCL -------------------------------------------------------
cuda_root=""
nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /nonexistent/bin/nvcc)")
for c in "${CUDA_HOME:-}" "${CUDA_PATH:-}" "$(dirname "$nvcc_dir")" /usr/local/cuda \
  $(find /usr/local -maxdepth 1 -name 'cuda-*' 2>/dev/null | sort -V -r); do
  if [[ -n $c && -f $c/include/cuda_runtime.h ]]; then
    cuda_root=$c
    break
  fi
done
if [[ -z $cuda_root ]]; then
  say "no CUDA toolkit found (looked at CUDA_HOME, CUDA_PATH, nvcc in PATH, /usr/local/cuda*)"
  exit 1
fi
say "CUDA toolkit: $cuda_root ($("$cuda_root/bin/nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'no nvcc'))"

# Python site-packages that may hold NVIDIA wheels.
mapfile -t py_dirs < <(python3 - 2>/dev/null <<'EOF'
import site, sys
dirs = []
try:
    dirs += site.getsitepackages()
except Exception:
    pass
try:
    dirs.append(site.getusersitepackages())
except Exception:
    pass
dirs += sys.path
seen = set()
for d in dirs:
    if d and d not in seen:
        seen.add(d)
        print(d)
EOF
)
# wheel_dir NAME FILE: the nvidia/NAME folder of a wheel holding lib/FILE.
wheel_dir() {
  local d f
  for d in "${py_dirs[@]}"; do
    for f in "$d"/nvidia/"$1"/lib/$2; do
      [[ -e $f ]] && { echo "$d/nvidia/$1"; return 0; }
    done
  done
  return 1
}
first() {
  local f
  for f in "$@"; do [[ -e $f ]] && { echo "$f"; return 0; }; done
  return 1
}

cuda_libdirs=("$cuda_root/lib64" "$cuda_root/lib" "$cuda_root/targets/x86_64-linux/lib" "$cuda_root/targets/sbsa-linux/lib")
nccl_lib="" nccl_inc=""
if [[ -n ${TRAINPLAN_NCCL_LIB:-} ]]; then
  nccl_lib=$(first "$TRAINPLAN_NCCL_LIB" "$TRAINPLAN_NCCL_LIB"/libnccl.so "$TRAINPLAN_NCCL_LIB"/libnccl.so.2) || nccl_lib=""
fi
[[ -n ${TRAINPLAN_NCCL_INCLUDE:-} && -f ${TRAINPLAN_NCCL_INCLUDE:-}/nccl.h ]] && nccl_inc=$TRAINPLAN_NCCL_INCLUDE
if [[ -z $nccl_lib ]]; then
  for d in "${cuda_libdirs[@]}" /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/aarch64-linux-gnu; do
    nccl_lib=$(first "$d/libnccl.so" "$d/libnccl.so.2") && break
  done
  [[ -n $nccl_lib && -z $nccl_inc ]] && nccl_inc=$(dirname "$(first "$cuda_root/include/nccl.h" /usr/include/nccl.h)" 2>/dev/null)
  [[ $nccl_inc == . ]] && nccl_inc=""
fi
if w=$(wheel_dir nccl 'libnccl.so*'); then
  # A wheel gives the library and the header that match it.
  if [[ -z $nccl_lib || -z $nccl_inc ]]; then
    nccl_lib=$(first "$w"/lib/libnccl.so "$w"/lib/libnccl.so.2)
    nccl_inc=$w/include
  fi
fi
if [[ -z $nccl_lib ]]; then
  say "NCCL not found in the toolkit, the system or Python wheels; searching the disk"
  nccl_lib=$(timeout 30 find / -xdev \( -name libnccl.so -o -name libnccl.so.2 \) 2>/dev/null | head -1)
fi
if [[ -z $nccl_inc && -n $nccl_lib ]]; then
  h=$(first "$(dirname "$nccl_lib")/../include/nccl.h") && nccl_inc=$(dirname "$h")
fi
if [[ -z $nccl_lib || -z $nccl_inc || ! -f $nccl_inc/nccl.h ]]; then
  say "NCCL library or nccl.h not found (library: '${nccl_lib}', headers: '${nccl_inc}'); set TRAINPLAN_NCCL_LIB and TRAINPLAN_NCCL_INCLUDE"
  exit 1
fi
say "NCCL: $nccl_lib, $nccl_inc/nccl.h ($(grep -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' "$nccl_inc/nccl.h" | awk '{print $3}' | paste -sd.))"

cmake_extra=()
cxx_flags=""
ld_dirs=("$(dirname "$nccl_lib")")
cublas_lib=""
for d in "${cuda_libdirs[@]}"; do
  cublas_lib=$(first "$d/libcublas.so" "$d"/libcublas.so.[0-9]*) && break
done
if [[ -n $cublas_lib && -f $cuda_root/include/cublas_v2.h ]]; then
  say "cuBLAS: $cublas_lib (toolkit)"
elif w=$(wheel_dir cublas 'libcublas.so*'); then
  cublas_lib=$(first "$w"/lib/libcublas.so "$w"/lib/libcublas.so.[0-9]*)
  cublaslt_lib=$(first "$w"/lib/libcublasLt.so "$w"/lib/libcublasLt.so.[0-9]*)
  say "cuBLAS: $cublas_lib (Python wheel)"
  # FindCUDAToolkit keeps these cache entries instead of searching.
  cmake_extra+=("-DCUDA_cublas_LIBRARY=$cublas_lib" "-DCUDA_cublasLt_LIBRARY=$cublaslt_lib")
  cxx_flags="-isystem $w/include"
  ld_dirs+=("$w/lib")
else
  say "cuBLAS not found in $cuda_root or in Python wheels"
  exit 1
fi
for d in "${cuda_libdirs[@]}"; do [[ -d $d ]] && ld_dirs+=("$d"); done
LD_LIBRARY_PATH=$(IFS=:; echo "${ld_dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH

# --- build ----------------------------------------------------------------------
bundle=${TRAINPLAN_BUNDLE_DIR:-$root/third_party_bundle}
for h in nlohmann/json.hpp CLI/CLI.hpp Eigen/Dense boost/graph/adjacency_list.hpp; do
  if [[ ! -f $bundle/include/$h ]]; then
    say "$bundle/include/$h missing: run calibrate/bundle_headers.sh on a machine with the -dev packages and bring third_party_bundle/ along"
    exit 1
  fi
done
build=$root/build-gpu
generator=(-G Ninja)
command -v ninja >/dev/null 2>&1 || generator=(-G "Unix Makefiles")
if [[ -f $build/CMakeCache.txt ]] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${generator[1]}\$" "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi
run_logged configure "$(slot 90 300)" cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  "-DTRAINPLAN_BUNDLE_DIR=$bundle" -DTRAINPLAN_CUDA=ON -DTRAINPLAN_BUILD_TESTS=OFF \
  "-DCUDAToolkit_ROOT=$cuda_root" "-DTRAINPLAN_NCCL_LIBRARY=$nccl_lib" "-DTRAINPLAN_NCCL_INCLUDE_DIR=$nccl_inc" \
  "-DCMAKE_CXX_FLAGS=$cxx_flags" ${cmake_extra[@]+"${cmake_extra[@]}"} || exit 1
run_logged build "$(slot 300 150)" cmake --build "$build" --target trainplan -j "$(nproc)" || exit 1
tp=$(first "$build/planner/trainplan" "$build/trainplan") || tp=$(find "$build" -type f -name trainplan -perm -u+x | head -1)
if [[ -z $tp ]]; then
  say "no trainplan binary under $build"
  exit 1
fi
"$tp" --version
ldd "$tp" | grep -E 'nccl|cublas|cudart' | tee -a "$out/environment.txt"

# --- cluster --------------------------------------------------------------------
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1)
cluster=${TRAINPLAN_CLUSTER:-}
if [[ -z $cluster ]]; then
  case $gpu_name in
    *H200*) cluster=dgx-h200 ;;
    *H100*) cluster=dgx-h100 ;;
    *B200*) cluster=dgx-b200 ;;
    *A100*) cluster=dgx-a100 ;;
    *4090*) cluster=rtx4090-pcie ;;
    *V100*) cluster=v100-pcie ;;
    *)
      say "no built-in cluster for GPU '$gpu_name'; set TRAINPLAN_CLUSTER to a cluster name or JSON path"
      exit 1
      ;;
  esac
fi
say "GPU '$gpu_name' -> cluster $cluster"

# --- calibrate ------------------------------------------------------------------
# One GPU: no collectives run (world size 1); the sweep flags keep any that do
# short.  Flags are passed only where `calibrate --help` lists them; if they
# are refused (exit 2, bad input), the run is retried with none.
cal=$out/calibration.json
cal_help=$("$tp" calibrate --help 2>&1)
has_flag() { grep -qE -- "(^|[ ,])$2([ ,=]|$)" <<<"$1"; }
cal_args=(calibrate --backend cuda --out "$cal")
for f in "-b 1048576" "-e 67108864" "-f 4" "--iters 5" "--warmup 2"; do
  # shellcheck disable=SC2206  # "-b 1048576" is two words
  has_flag "$cal_help" "${f%% *}" && cal_args+=($f)
done
cal_extra=()
# GEMM shapes of the two models only (the cuda default is every built-in).
has_flag "$cal_help" --model && cal_extra+=(--model gpt3-1.3b --model llama3-8b)
has_flag "$cal_help" --mbs && cal_extra+=(--mbs "1,2,4")
has_flag "$cal_help" --seq && cal_extra+=(--seq 2048)
run_logged calibrate "$(slot 170 130)" "$tp" "${cal_args[@]}" ${cal_extra[@]+"${cal_extra[@]}"}
rc=$?
if ((rc == 2)); then
  run_logged calibrate_retry "$(slot 170 130)" "$tp" calibrate --backend cuda --out "$cal"
  rc=$?
fi
((rc != 0)) && status=1
if [[ ! -s $cal ]]; then
  say "no calibration.json: validating against the cluster's built-in figures"
  cal=""
fi

# --- validate -------------------------------------------------------------------
# plan.json as planner/plan/plan_file.cc reads it.  llama3-8b fits one
# 141 GB GPU without offload only with bf16 gradients and full recomputation
# (`trainplan memory`: 128-134 GiB for mbs 1-4).
write_plan() {  # file model mbs recompute grad_dtype
  cat >"$1" <<EOF
{
  "model": "$2",
  "cluster": "$cluster",
  "gpus": 1,
  "tp": 1, "pp": 1, "dp": 1, "cp": 1, "vp": 1,
  "zero": 0,
  "mbs": $3,
  "gbs": $(($3 * 2)),
  "seq": 2048,
  "recompute": "$4",
  "sp": false,
  "schedule": "1f1b",
  "precision": "bf16",
  "grad_dtype": "$5",
  "attention": "flash",
  "dp_mode": "sync",
  "offload": "none"
}
EOF
}
val_help=$("$tp" validate --help 2>&1)
plans=()
for mbs in 1 2 4; do
  write_plan "$out/plans/gpt3-1.3b_mbs$mbs.json" gpt3-1.3b "$mbs" none fp32
  write_plan "$out/plans/llama3-8b_mbs$mbs.json" llama3-8b "$mbs" full bf16
done
# Most informative first, so a short budget still covers both models.
plans=(gpt3-1.3b_mbs1 llama3-8b_mbs1 gpt3-1.3b_mbs4 llama3-8b_mbs4 gpt3-1.3b_mbs2 llama3-8b_mbs2)
done_plans=()
for p in "${plans[@]}"; do
  if (($(left) < 25)); then
    say "budget nearly spent: skipping $p and the rest"
    status=1
    break
  fi
  args=(validate --backend cuda --plan "$out/plans/$p.json")
  [[ -n $cal ]] && args+=(--calibration "$cal")
  has_flag "$val_help" --steps && args+=(--steps "$steps")
  has_flag "$val_help" --out && args+=(--out "$out/validate_$p.json")
  run_logged "validate_$p" "$(slot 90 10)" "$tp" "${args[@]}" || status=1
  cp "$out/logs/validate_$p.log" "$out/validate_$p.txt"
  done_plans+=("$p")
done

# --- summary --------------------------------------------------------------------
{
  echo "# trainplan on '$gpu_name' (cluster $cluster), $((SECONDS - t_start)) s, status $status"
  echo "# $(grep -m1 -E 'CUDA runtime' "$out/logs/calibrate.log" 2>/dev/null || true)"
  for p in ${done_plans[@]+"${done_plans[@]}"}; do
    echo
    echo "## $p"
    tail -n 30 "$out/validate_$p.txt"
  done
} >"$out/summary.txt"
echo
echo "================================================================ summary"
cat "$out/summary.txt"
say "results in $out"
exit "$status"

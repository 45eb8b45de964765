#!/usr/bin/env bash
# Issue 15's scaling table: `recommend` wall time and peak RSS for Llama 3
# 8B/70B/405B on dgx-h100 at 1, 8, 64, 512 and 2,048 nodes (median of 3 runs
# with farm-bench), and full-rank simulation of Llama 3 405B (TP8 PP16, DP
# growing) from 1,024 to 131,072 GPUs with events/s (trainplan_bench).
# Prints Markdown tables; docs/performance.md quotes them.
# Usage: bash tools/scaling.sh [build-dir]   (after a Release build)
set -euo pipefail
B=${1:-build}
T=$B/planner/trainplan
export TRAINPLAN_DATA_DIR=${TRAINPLAN_DATA_DIR:-$(pwd)}
field() {  # farm-bench output, row name -> median
  awk -v k="$1" '$0 ~ "^A "k {print $(NF-1)}'
}
echo "| model | nodes (GPUs) | wall median (s) | wall min-max (s) | peak RSS (MiB) | best layout |"
echo "|---|---:|---:|---:|---:|---|"
for m in llama3-8b llama3-70b llama3-405b; do
  for n in 1 8 64 512 2048; do
    out=$(farm-bench -n 3 --timeout 600 -- "$T" recommend --model "$m" --cluster dgx-h100 --nodes "$n" 2>&1)
    wall=$(echo "$out" | awk '/^A wall s/ {print $5}')
    lo=$(echo "$out" | awk '/^A wall s/ {print $4}')
    hi=$(echo "$out" | awk '/^A wall s/ {print $6}')
    rss=$(echo "$out" | awk '/^A peak MiB/ {print $5}')
    best=$("$T" recommend --model "$m" --cluster dgx-h100 --nodes "$n" 2>/dev/null |
      awk '$1 == "1" && NF > 10 {printf "tp%s pp%s dp%s cp%s vp%s zero%s mbs%s", $3, $4, $5, $6, $7, $8, $10; exit}')
    echo "| $m | $n ($((n * 8))) | $wall | $lo-$hi | $rss | ${best:-nothing fits} |"
  done
done
echo
echo "| GPUs | dp | simulated ranks | tasks | events | wall median (s) | events/s | peak RSS (GiB) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in 128 1024 2048 4096 16384; do
  out=$("$B/trainplan_bench" --nodes "$n" --gbs "$n" --repeat 3)
  row=$(echo "$out" | awk '$1 == "full"')
  rss=$(echo "$out" | awk '/peak resident/ {print $(NF-1)}')
  read -r _ ranks tasks events wall rate _ <<< "$row"
  gpus=$((n * 8))  # dgx-h100; TP8 PP16: dp = GPUs / 128, one simulated rank per TP group
  echo "| $gpus | $((gpus / 128)) | $ranks | $tasks | $events | $wall | $rate | $rss |"
done

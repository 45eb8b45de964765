#!/usr/bin/env bash
# The report page in a real browser (issue 16): `trainplan report` and
# `simulate --html` write one self-contained page; headless Chromium (Debian's
# chromium package) loads it offline, every chart is drawn with data, the
# console stays free of errors, and a screenshot is not blank.
#   report_test.sh TRAINPLAN
# Exit 77 (skipped) when no Chromium is installed; .ci/run installs it.
set -u
T=$1
HERE=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
CHROME=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$CHROME" ]; then
  echo "no chromium on PATH: skipped (apt-get install chromium)"
  exit 77
fi
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Headless Chromium with no network at all: every host resolves nowhere, so
# a page that fetched anything would show it as a console/network error.
browse() {
  "$CHROME" --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions \
    --host-resolver-rules="MAP * ~NOTFOUND" --virtual-time-budget=15000 --enable-logging=stderr --v=0 "$@"
}

check_page() {
  local page=$1 min_charts=$2 label=$3
  [ -s "$page" ] || { fail "$label: no page written"; return; }
  # Self-contained: outside the inlined scripts, no tag refers to another
  # file or URL (scripts, styles, images, frames).
  if python3 - "$page" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
outside = re.sub(r"<script[^>]*>.*?</script>", "", text, flags=re.S)
tags = re.findall(r"<(?:script|link|img|iframe|object|embed)\b[^>]*\b(?:src|href|data)=", text[:0] + outside)
scripts = re.findall(r"<script\b[^>]*\bsrc=", text)
sys.exit(0 if tags or scripts else 1)
PY
  then
    fail "$label: the page refers to an external resource"
  fi
  browse --dump-dom "file://$page" > "$work/dom.html" 2> "$work/console.log"
  grep -q 'data-ready="1"' "$work/dom.html" || fail "$label: the page's script did not finish (no data-ready)"
  local charts
  charts=$(grep -o 'data-charts="[0-9]*"' "$work/dom.html" | grep -o '[0-9]*' | head -1)
  [ "${charts:-0}" -ge "$min_charts" ] || fail "$label: ${charts:-0} charts drawn, expected >= $min_charts"
  # Every chart container carries its number of data points; none is empty,
  # and each holds a canvas (ECharts drew into it).
  local empty
  empty=$(grep -o 'data-points="[0-9]*"' "$work/dom.html" | grep -c 'data-points="0"')
  [ "$empty" = 0 ] || fail "$label: $empty charts without data"
  local canvases
  canvases=$(grep -o '<canvas' "$work/dom.html" | wc -l)
  [ "$canvases" -ge "$min_charts" ] || fail "$label: $canvases canvases for $charts charts"
  # No console errors (uncaught exceptions, failed loads).
  if grep -E 'CONSOLE|Uncaught|ERR_NAME_NOT_RESOLVED|Failed to load' "$work/console.log" | grep -v 'DevTools' > "$work/errors"; then
    [ -s "$work/errors" ] && fail "$label: console: $(head -3 "$work/errors")"
  fi
  # A screenshot that is not blank: some share of it drawn, in many colours.
  browse --window-size=1400,2600 --screenshot="$work/shot.png" "file://$page" > /dev/null 2>&1
  [ -s "$work/shot.png" ] || { fail "$label: no screenshot"; return; }
  read -r w h nonwhite colours < <(python3 "$HERE/png_stats.py" "$work/shot.png")
  python3 -c "import sys; sys.exit(0 if float('$nonwhite') >= 0.05 and int('$colours') >= 20 else 1)" ||
    fail "$label: screenshot looks blank ($w x $h, non-white $nonwhite, $colours colours)"
  echo "$label: $charts charts, screenshot ${w}x${h}, non-white $nonwhite, $colours colours"
}

# recommend's page on 2 nodes: why-lose, memory, one layer by op, timeline,
# memory over time, scaling (tokens/s and MFU) = 7 charts.
"$T" report --model llama3-8b --cluster dgx-h100 --nodes 2 --out "$work/report.html" > "$work/out" 2>&1 ||
  fail "report: $(cat "$work/out")"
grep -q "^wrote $work/report.html" "$work/out" || fail "report: unexpected output: $(cat "$work/out")"
check_page "$work/report.html" 7 "report llama3-8b 2 nodes"
# With faults: goodput against the checkpoint interval and cluster size too.
# (gpt3-1.3b on 2 nodes: stragglers simulate every rank, so a small search.)
"$T" report --model gpt3-1.3b --cluster dgx-a100 --nodes 2 --top 2 --out "$work/faults.html" --failure-rates llama3 \
  --train-tokens 100B --storage-bandwidth 100GB/s --stragglers jitter=lognormal:0.05 > "$work/out" 2>&1 ||
  fail "report with faults: $(cat "$work/out")"
check_page "$work/faults.html" 9 "report with faults"
# One plan: simulate --html (memory, one layer by op, timeline, memory over time).
"$T" simulate --model llama3-8b --cluster dgx-h100 --nodes 1 --tp 2 --pp 2 --vp 2 --gbs 32 --html "$work/plan.html" \
  > "$work/out" 2>&1 || fail "simulate --html: $(cat "$work/out")"
check_page "$work/plan.html" 4 "simulate --html"
# Same inputs, byte-identical page.
"$T" simulate --model llama3-8b --cluster dgx-h100 --nodes 1 --tp 2 --pp 2 --vp 2 --gbs 32 --html "$work/plan2.html" \
  > /dev/null 2>&1
cmp -s "$work/plan.html" "$work/plan2.html" || fail "simulate --html is not deterministic"

[ "$failures" = 0 ] && echo "report test: all passed"
[ "$failures" = 0 ]

#!/usr/bin/env bash
# Writes docs/report-example.html (issue 16: llama3-70b on 64 H100) and its
# screenshots docs/report-example-*.png with headless Chromium.
#   bash tools/report_example.sh [build/planner/trainplan]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${1:-$ROOT/build/planner/trainplan}
export TRAINPLAN_DATA_DIR=$ROOT
"$T" report --model llama3-70b --cluster dgx-h100 --gpus 64 --out "$ROOT/docs/report-example.html"
CHROME=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$CHROME" ]; then
  echo "no chromium: page written, screenshots skipped"
  exit 0
fi
for size in 1400,2200 1400,4400; do
  name=top; [ "$size" = 1400,4400 ] && name=full
  "$CHROME" --headless --no-sandbox --disable-gpu --no-first-run --host-resolver-rules="MAP * ~NOTFOUND" \
    --virtual-time-budget=15000 --window-size=$size --hide-scrollbars \
    --screenshot="$ROOT/docs/report-example-$name.png" "file://$ROOT/docs/report-example.html" > /dev/null 2>&1
done
ls -la "$ROOT"/docs/report-example*

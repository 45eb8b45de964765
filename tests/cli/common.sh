# Shared helpers of the CLI test scripts (sourced).  Each check runs the
# trainplan binary in $BIN with stdout/stderr captured under $TMP.
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
CHECKS=0

fail() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}

# run_bin <args...>: runs trainplan with stdout in $TMP/out, stderr in
# $TMP/err, exit code in RC.
run_bin() {
  "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"
  RC=$?
}

# expect_error <name> <expected stderr line> <args...>
expect_error() {
  local name=$1 expected=$2
  shift 2
  CHECKS=$((CHECKS + 1))
  echo "check $CHECKS: $name"
  run_bin "$@"
  [ "$RC" -eq 2 ] || fail "$name: exit code $RC, expected 2 (stderr: $(cat "$TMP/err"))"
  [ ! -s "$TMP/out" ] || fail "$name: stdout is not empty: $(cat "$TMP/out")"
  local lines
  lines=$(wc -l <"$TMP/err")
  [ "$lines" -eq 1 ] || fail "$name: $lines lines on stderr, expected 1: $(cat "$TMP/err")"
  local actual
  actual=$(cat "$TMP/err")
  [ "$actual" == "$expected" ] || fail "$name: wrong message
   got: $actual
  want: $expected"
}

# expect_ok <name> <args...>: exit 0, empty stderr.
expect_ok() {
  local name=$1
  shift
  CHECKS=$((CHECKS + 1))
  echo "check $CHECKS: $name"
  run_bin "$@"
  [ "$RC" -eq 0 ] || fail "$name: exit code $RC, expected 0 (stderr: $(cat "$TMP/err"))"
  [ ! -s "$TMP/err" ] || fail "$name: stderr is not empty: $(cat "$TMP/err")"
}

# json_check <name> <python code using d>: runs the code on the JSON in $TMP/out.
json_check() {
  local name=$1 code=$2
  python3 -c "
import json, sys
with open(sys.argv[1]) as f:
    d = json.load(f)
$code
" "$TMP/out" || fail "$name: JSON check failed"
}

# known_names <subdir>: the *.json stems of $TRAINPLAN_DATA_DIR/<subdir>,
# byte-sorted and joined with ", " (the "known: ..." hint of an unknown name).
known_names() {
  (cd "$TRAINPLAN_DATA_DIR/$1" && for f in *.json; do printf '%s\n' "${f%.json}"; done) |
    LC_ALL=C sort | paste -sd, - | sed 's/,/, /g'
}

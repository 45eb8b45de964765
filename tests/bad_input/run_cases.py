#!/usr/bin/env python3
"""The bad-input corpus: every case in cases.json run against the trainplan
binary, each checked for its exit code and its exact one-line message.

  run_cases.py TRAINPLAN [--record]

Cases run in this folder (so files/... paths read as given) with
TRAINPLAN_DATA_DIR set to the repository; "$TMP" in args and messages is a
fresh temporary folder.  A case passes when the exit code is the expected
one (2 unless "exit" says), stderr is exactly the expected line (one line,
nothing else), "stdout_has" (if given) occurs in stdout, and "no_file" (if
given) was not created.  Every case also runs under a 30 s timeout: a hang
is a failure.  --record prints what each case gives instead of checking,
for writing new cases (review every message before freezing it).
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main():
    if len(sys.argv) < 2:
        print("usage: run_cases.py TRAINPLAN [--record]", file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    record = "--record" in sys.argv[2:]
    with open(os.path.join(HERE, "cases.json")) as f:
        cases = json.load(f)
    env = dict(os.environ, TRAINPLAN_DATA_DIR=ROOT)
    failures = 0
    names = set()
    for case in cases:
        name = case["name"]
        assert name not in names, "duplicate case name " + name
        names.add(name)
        if case.get("stdout_to") and not os.path.exists(case["stdout_to"]):
            print(f"skipped {name}: {case['stdout_to']} does not exist here")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            sub = lambda s: s.replace("$TMP", tmp)
            args = [sub(a) for a in case["args"]]
            stdout_to = case.get("stdout_to")
            out = open(stdout_to, "w") if stdout_to else subprocess.PIPE
            try:
                p = subprocess.run([binary] + args, cwd=HERE, env=env, stdout=out, stderr=subprocess.PIPE,
                                   timeout=30, input=b"")
            except subprocess.TimeoutExpired:
                print(f"FAIL {name}: no answer within 30 s (a hang)")
                failures += 1
                continue
            finally:
                if stdout_to:
                    out.close()
            stderr = p.stderr.decode("utf-8", "replace")
            stdout = p.stdout.decode("utf-8", "replace") if p.stdout is not None else ""
            if record:
                print(json.dumps({"name": name, "exit": p.returncode, "stderr": stderr}, ensure_ascii=False))
                continue
            want_exit = case.get("exit", 2)
            want = sub(case.get("stderr", ""))
            problems = []
            if p.returncode != want_exit:
                problems.append(f"exit {p.returncode}, want {want_exit}")
            if "stderr" in case and stderr != want + "\n":
                problems.append(f"stderr {stderr!r}\n   want {want + chr(10)!r}")
            if "stdout_has" in case and case["stdout_has"] not in stdout:
                problems.append(f"stdout lacks {case['stdout_has']!r}")
            if "no_file" in case and os.path.exists(sub(case["no_file"])):
                problems.append(f"{sub(case['no_file'])} was written")
            if problems:
                failures += 1
                print(f"FAIL {name}: " + "; ".join(problems))
    if record:
        return 0
    print(f"{len(cases) - failures} of {len(cases)} bad-input cases answered as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

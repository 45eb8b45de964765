#!/usr/bin/env python3
"""Mutation sweep of the input files: every field of one shipped file per
loader (model, cluster, plan, calibration) replaced in turn by each of a
set of hostile values, and the CLI run on the result.

  sweep.py TRAINPLAN

The oracle is the promise itself (DESIGN.md "bad input"): every run ends
within 20 s with exit 0 (the value happened to be valid) or exit 2 with
exactly one line on stderr that names the file and either the JSON pointer
of the changed field (or of the object holding it) or the line and column
of a syntax error; never another exit code, a signal, a hang or a second
line.  Prints one line per loader and exits 1 on any violation.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Raw JSON text: what a mistyped or hostile file holds.
HOSTILE = ["1e400", "-1e400", "-1", "0", "0.5", "1.5", "2147483648", "4294967296", "1099511627776",
           "9223372036854775808", "18446744073709551616", "-9223372036854775809", "null", "true", "[]", "{}",
           '"x"', '""', '"1e30GiB"', '"-1us"', '"nanGB/s"', '"1e400TFLOP/s"', '"\\u0007\\n"']

LOADERS = {
    "model": ("tests/data/model_tiny.json", ["memory", "--cluster", "dgx-a100", "--nodes", "1", "--model", "{}"]),
    "cluster": ("topologies/dgx-a100.json", ["simulate", "--model", "gpt-tiny", "--nodes", "2", "--cluster", "{}"]),
    "plan": ("tests/data/export/plan_gpt3-1.3b_zero2.json", ["simulate", "--plan", "{}"]),
    "calibration": ("tests/data/calibration/cpu_small.json",
                    ["simulate", "--model", "gpt-tiny", "--cluster", "cpu-local", "--gpus", "1", "--calibration", "{}"]),
}


def leaves(value, pointer=""):
    """(pointer, value) of every leaf; arrays contribute their first element only."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, pointer + "/" + k.replace("~", "~0").replace("/", "~1"))
    elif isinstance(value, list):
        if value:
            yield from leaves(value[0], pointer + "/0")
    else:
        yield pointer, value


def replace_at(doc, pointer, raw):
    """The document as JSON text with the leaf at `pointer` replaced by raw JSON text."""
    marker = "\u0001MUTATION\u0001"
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    node = doc
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node[p]
    last = parts[-1]
    key = int(last) if isinstance(node, list) else last
    old = node[key]
    node[key] = marker
    text = json.dumps(doc, indent=2).replace(json.dumps(marker), raw)
    node[key] = old
    return text


def run(binary, args, env):
    try:
        p = subprocess.run([binary] + args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=20)
        return p.returncode, p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return "timeout", ""


def main():
    if len(sys.argv) != 2:
        print("usage: sweep.py TRAINPLAN", file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    env = dict(os.environ, TRAINPLAN_DATA_DIR=ROOT)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for loader, (src, template) in LOADERS.items():
            with open(os.path.join(ROOT, src)) as f:
                doc = json.load(f)
            jobs = []
            for pointer, _ in leaves(doc):
                for i, raw in enumerate(HOSTILE):
                    path = os.path.join(tmp, f"{loader}-{len(jobs)}.json")
                    with open(path, "w") as f:
                        f.write(replace_at(doc, pointer, raw))
                    args = [a.replace("{}", path) for a in template]
                    jobs.append((pointer, raw, path, pool.submit(run, binary, args, env)))
            counts = {0: 0, 2: 0}
            for pointer, raw, path, fut in jobs:
                rc, err = fut.result()
                lines = err.splitlines()
                parent = pointer.rsplit("/", 1)[0]
                named = (rc == 2 and len(lines) == 1 and lines[0].startswith("trainplan: " + path + ": ") and
                         (pointer in lines[0] or (parent and parent + ":" in lines[0]) or ": line " in lines[0]))
                if rc == 0 and not err:
                    counts[0] += 1
                elif named:
                    counts[2] += 1
                else:
                    bad += 1
                    print(f"VIOLATION {loader} {pointer} = {raw}: exit {rc}, stderr {err!r}")
            print(f"{loader}: {len(jobs)} mutations of {src}: {counts[2]} refused with the field named, "
                  f"{counts[0]} accepted as valid")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

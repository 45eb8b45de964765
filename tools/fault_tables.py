#!/usr/bin/env python3
"""Rebuilds the two tables of docs/faults.md section 9 from docs/fault-injection.md.

Usage: python3 tools/fault_tables.py docs/fault-injection.md docs/faults.md
The tables sit between the markers <!-- fault-tables begin --> and <!-- fault-tables end -->
in docs/faults.md; tools/faults_validate.sh calls this after writing docs/fault-injection.md,
so the summary always quotes the run it summarises.
"""
import re
import sys


def sections(text):
    """(heading, body) for each '## ' or '### ' heading."""
    parts = re.split(r"^(#{2,3} .*)$", text, flags=re.M)
    return [(parts[i].lstrip("#").strip(), parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def rows(body):
    """quantity -> (predicted, measured, error) from a validate table."""
    out = {}
    for line in body.splitlines():
        f = line.split()
        if len(f) >= 4 and re.fullmatch(r"[a-z_]+_(s|gib)|straggler_tax", f[0]):
            try:
                out[f[0]] = (float(f[1]), float(f[2]), f[3])
            except ValueError:
                pass
    return out


def ms(pair):
    p, m, _ = pair
    return f"{p * 1e3:.0f} / {m * 1e3:.0f} ms"


def main(src, dst):
    text = open(src).read()
    recovery, stragglers = [], []
    for head, body in sections(text):
        m = re.fullmatch(r"(\w+): ((?:kill|hang):\S+) \((sync|async) checkpoints\)", head)
        if m:
            r = rows(body)
            by = re.search(r"detected by (.*?) \(heartbeat", body)
            persist = ms(r["checkpoint_persist_s"]) if "checkpoint_persist_s" in r else "-"
            recovery.append(
                f"| {m.group(1)} | `{m.group(2)} ({m.group(3)} checkpoints)` | {by.group(1) if by else '-'} | "
                f"{ms(r['detection_s'])} | {ms(r['restart_s'])} | {ms(r['checkpoint_write_s'])} | {persist} | "
                f"{ms(r['checkpoint_load_s'])} | {ms(r['lost_work_s'])} | {ms(r['redo_s'])} | {ms(r['recovery_s'])} |")
        m = re.fullmatch(r"(\w+): ((?:slow|link):\S+)", head)
        if m:
            r = rows(body)
            tax = r["straggler_tax"]
            stragglers.append(
                f"| {m.group(1)} | `{m.group(2)}` | {tax[0]:.3f} / {tax[1]:.3f} | {tax[2]} | "
                f"{ms(r['slowed_step_time_s'])} | {ms(r['slowed_arrival_spread_s'])} |")
    if not recovery or not stragglers:
        sys.exit(f"{src}: no recovery or straggler sections found")
    date = re.search(r"on \d+ cores, (\d{4}-\d\d-\d\d)", text)
    table = "\n".join([
        f"Recovery, predicted / measured (2 ranks, a checkpoint every 2 steps; run of {date.group(1) if date else '?'}):",
        "",
        "| plan | fault | detected by | detection | restart | checkpoint (blocking) | persist (async) | load | lost work | redo | recovery |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *recovery,
        "",
        "Stragglers, predicted / measured:",
        "",
        "| plan | fault | straggler tax | error | slowed step | arrival spread at gradient syncs (slowed) |",
        "|---|---|---|---|---|---|",
        *stragglers,
    ])
    doc = open(dst).read()
    begin, end = "<!-- fault-tables begin -->", "<!-- fault-tables end -->"
    if begin not in doc or end not in doc:
        sys.exit(f"{dst}: the markers {begin} and {end} are missing")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    open(dst, "w").write(head + begin + "\n" + table + "\n" + end + tail)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])

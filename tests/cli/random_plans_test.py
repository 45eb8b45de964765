#!/usr/bin/env python3
"""Random plans through simulate and export: properties that hold for every plan, checked on a fixed-seed
sample of the space the hand-written tests do not enumerate (every built-in model and cluster, every
framework, schedule, recompute, offload, precision, gradient dtype and MoE option, in combinations).

    random_plans_test.py <trainplan binary> [--seed S] [--plans N] [--exports K] [--faults F] [--steady L]

TRAINPLAN_DATA_DIR = the repository root.  Oracles, none of which shares code with what it checks:

1. The contract of the command line (DESIGN.md, "bad input"): a plan either simulates (exit 0), or is one
   that cannot run (exit 0, "this plan cannot run:" and its reasons), or its flags are refused with one line
   on stderr naming the problem, nothing on stdout, exit 2; never a crash or a hang.
2. Two accountings of one step's memory: the event engine's allocation trace (each pass allocating and
   freeing its bytes in simulated time) against the closed form of `memory` (the same terms summed at the
   schedule's worst point).  The closed form is an upper bound of the trace on every stage; on the
   schedules whose worst point has one backward in flight with every in-flight activation held (1F1B,
   GPipe, naive) the two are equal.  The interleaved, zero-bubble and DualPipe orders may put the largest
   transient (the loss's gradient buffers, a recomputed layer) at another moment than the largest held
   activations, so there only the bound is asserted.
3. Same inputs, same output: a plan simulated twice prints byte-identical text.
4. A saved plan read back (`simulate --plan`) simulates as its flags did; every export of it either is
   accepted by the framework's own rules (tests/export/check_export.py for Megatron-LM, DeepSpeed and the
   PyTorch script; tests/export/torchtitan_rules.py for torchtitan's TOML and Python configs) or is a
   one-line refusal with exit 2 and nothing on stdout.
5. The failure model's identities, on random MTBFs, storage, restart times, checkpoint modes and intervals
   (docs/faults.md): the job's failure rate is the sum of its GPUs' and nodes' (1/MTBF each); the fault-free
   time is the tokens over the step's rate; the expected and mean times are never below it; p50 <= p90;
   the wall-time breakdown adds up to the mean; goodput lies in [0, 1]; and where the job spans several
   intervals, the automatic interval's goodput is not below the best of the steady-state sweep around it.
6. The steady-state shortcut against the whole run: a long step is simulated from three short probes and
   extended by their common increment (simulate_steady_state); on plans drawn with 24 to 96 micro-batches
   per pipeline, `simulate --json` must give the same step time as the same plan simulated whole (a trace,
   `--trace F`, forces the whole run).  It found the shortcut extending a transient (2026-12-07).
7. What `recommend --framework F --save` picks, that framework's exporter writes and the framework's own
   rules accept (the oracles of 4), on searches drawn over the smaller built-in models and every cluster:
   the plans a user is most likely to launch.
"""

import argparse
import glob
import json
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
ORACLE = os.path.join(REPO, "tests", "export", "check_export.py")
TITAN = os.path.join(REPO, "tests", "export", "torchtitan_rules.py")
EQUAL_SCHEDULES = ("1f1b", "gpipe", "naive")
TARGETS = ("megatron", "deepspeed", "torchtitan", "torchtitan-py", "fsdp")


def load(pattern):
    out = {}
    for path in sorted(glob.glob(os.path.join(REPO, pattern))):
        with open(path, encoding="utf-8") as f:
            out[os.path.splitext(os.path.basename(path))[0]] = json.load(f)
    return out


def random_flags(rng, models, clusters):
    """One random plan as simulate flags, or None when its degrees do not divide the GPUs."""
    name = rng.choice(sorted(models))
    model = models[name]
    cname = rng.choice(sorted(c for c in clusters if c != "cpu-local"))
    host = clusters[cname].get("host", {}).get("gpus") or clusters[cname]["gpus_per_node"]
    gpus = host * rng.choice([1, 2, 4, 8, 16])
    tp, pp, cp = rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 2, 4, 8]), rng.choice([1, 1, 2])
    if gpus % (tp * pp * cp):
        return None
    dp = gpus // (tp * pp * cp)
    mbs = rng.choice([1, 2, 4])
    flags = ["--model", name, "--cluster", cname, "--gpus", str(gpus), "--tp", str(tp), "--pp", str(pp),
             "--cp", str(cp), "--mbs", str(mbs), "--gbs", str(dp * mbs * rng.choice([1, 2, 4, 8, 16])),
             "--seq", str(rng.choice([1024, 2048, 4096, 8192])), "--zero", str(rng.choice([0, 1, 1, 2, 3])),
             "--recompute", rng.choice(["none", "selective", "full"])]
    framework = rng.choice(["generic", "megatron-core", "megatron-lm", "deepspeed", "torchtitan", "pytorch"])
    flags += ["--framework", framework]
    if tp > 1 and rng.random() < 0.5:
        flags.append("--sp")
    if pp > 1 and rng.random() < 0.4:
        flags += ["--vp", str(rng.choice([2, 3, 4]))]
    if cp > 1 and framework in ("generic", "megatron-core") and rng.random() < 0.4:
        flags += ["--cp-comm-type", "a2a"]
    if pp > 1 and rng.random() < 0.2:
        flags += ["--schedule", rng.choice(["gpipe", "zb-1p", "zb-2p", "zb-v", "dualpipe-v", "dualpipe",
                                            "interleaved-zb"])]
    if rng.random() < 0.15:
        flags += ["--offload", rng.choice(["optimizer", "params"])]
    if rng.random() < 0.2:
        flags += ["--grad-dtype", "bf16"]
    if rng.random() < 0.2:
        flags += ["--precision", rng.choice(["fp8", "fp16"])]
    experts = (model.get("moe") or {}).get("experts")
    if experts:
        ep = rng.choice([1, 2, 4, 8, 16])
        if experts % ep == 0:
            flags += ["--ep", str(ep)]
        if rng.random() < 0.3:
            flags += ["--etp", "1"]
        if rng.random() < 0.3:
            flags += ["--moe-dispatcher", rng.choice(["alltoall", "deepep", "hybridep"])]
        if rng.random() < 0.2:
            flags.append("--ep-overlap")
        if framework == "megatron-core" and rng.random() < 0.3:
            flags.append("--moe-router-fusion")
        if framework == "megatron-core" and (model.get("moe") or {}).get("shared_experts") and rng.random() < 0.4:
            flags.append("--moe-shared-expert-overlap")
    # Drawn from a stream seeded by the plan so far, so the flags added later keep the main stream's sample.
    if framework in ("megatron-core", "generic") and random.Random(" ".join(flags)).random() < 0.4:
        flags.append("--cross-entropy-fusion")
    return flags


def stage_peaks(stdout):
    """(stage, simulated GiB, closed-form GiB) from simulate's memory table."""
    return [(int(m.group(1)), float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"^\s+stage\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s*$", stdout, re.M)]


def schedule_of(stdout):
    m = re.search(r"schedule=(\S+)", stdout)
    return m.group(1) if m else ""


def check_faults(a, run, rng, failures):
    """Draws failure models on a few plans; appends what breaks an identity to failures; returns the count."""
    checked = 0
    for _ in range(a.faults):
        model, gpus = rng.choice([("llama3-8b", 8), ("llama3-8b", 512), ("gpt3-1.3b", 4096), ("llama3-70b", 64)])
        args = ["simulate", "--model", model, "--cluster", "dgx-h100", "--gpus", str(gpus), "--json",
                "--seed", str(rng.randint(1, 99)),
                "--mtbf-gpu", f"{rng.choice([1000, 10000, 50000, 200000])}h",
                "--storage-bandwidth", rng.choice(["10GB/s", "100GB/s", "1TB/s"]),
                "--train-tokens", rng.choice(["10B", "300B", "2T"])]
        if model == "llama3-70b":
            args += ["--tp", "8", "--zero", "1", "--recompute", "full"]
        if rng.random() < 0.5:
            args += ["--mtbf-node", f"{rng.choice([2000, 20000])}h"]
        if rng.random() < 0.3:
            args += ["--checkpoint-mode", "async"]
        if rng.random() < 0.3:
            args += ["--checkpoint-interval", rng.choice(["10min", "1h", "5h"])]
        if rng.random() < 0.3:
            args += ["--restart-time", rng.choice(["1min", "30min"])]
        what = " ".join(args)
        r = run([a.trainplan] + args)
        if r is None:
            continue
        if r.returncode != 0:
            failures.append(f"{what}: exit {r.returncode}: {r.stderr[-300:]}")
            continue
        d = json.loads(r.stdout)
        f, t = d.get("failures"), d.get("time_to_train_s")
        if not d.get("fits") or not f:
            continue
        checked += 1
        gpus_per_node = 8  # dgx-h100
        rate = gpus / f["mtbf_gpu_s"] + (gpus / gpus_per_node / f["mtbf_node_s"] if f["mtbf_node_s"] > 0 else 0)
        fault_free = d["train_tokens"] / d["tokens_per_s"]
        interval = f["interval"]
        checks = [
            (abs(f["job_mtbf_s"] * rate - 1) < 1e-3, f"job MTBF {f['job_mtbf_s']} s, 1/rate {1 / rate}"),
            # Whole steps: the last one may be partial in tokens.
            (abs(t["fault_free"] - fault_free) <= max(1.0, 1e-3 * fault_free) + d["step_time_s"],
             f"fault-free {t['fault_free']} s, tokens/rate {fault_free}"),
            (t["expected"] >= t["fault_free"] * (1 - 1e-9), "expected time below the fault-free time"),
            (t["mean"] >= t["fault_free"] * (1 - 1e-9), "mean time below the fault-free time"),
            (t["p50"] <= t["p90"] * (1 + 1e-9), "p50 above p90"),
            (0 <= d["goodput"] <= 1, f"goodput {d['goodput']}"),
            (abs(sum(f["wall_breakdown_s"].values()) - t["mean"]) <= 2e-3 * t["mean"] + 1,
             f"wall breakdown {sum(f['wall_breakdown_s'].values())} s, mean {t['mean']} s"),
        ]
        if interval["mode"] == "auto" and interval["seconds"] * 10 < t["fault_free"]:
            best = max(pt["goodput"] for pt in f["interval_sweep"])
            checks.append((f["goodput_expected"] >= best - 0.002,
                           f"automatic interval's goodput {f['goodput_expected']} below the sweep's best {best}"))
        for ok, msg in checks:
            if not ok:
                failures.append(f"{what}: {msg}")
    return checked


def check_steady(a, run, rng, failures, models, clusters, work):
    """Draws plans with many micro-batches; appends a shortcut that differs from the whole run; returns the count."""
    checked = 0
    trace = os.path.join(work, "steady-trace.json")
    for _ in range(a.steady * 4):
        if checked >= a.steady:
            break
        flags = random_flags(rng, models, clusters)
        if flags is None:
            continue
        value = lambda flag: int(flags[flags.index(flag) + 1])
        if value("--gpus") > 128:
            continue
        dp = value("--gpus") // (value("--tp") * value("--pp") * value("--cp"))
        flags[flags.index("--gbs") + 1] = str(dp * value("--mbs") * rng.choice([24, 48, 96]))
        short = run([a.trainplan, "simulate", "--json"] + flags)
        if short is None or short.returncode != 0 or "step_time_s" not in short.stdout:
            continue
        whole = run([a.trainplan, "simulate", "--json", "--trace", trace] + flags)
        if whole is None or whole.returncode != 0:
            failures.append("simulate --trace " + " ".join(flags) + ": failed where the run without a trace did not")
            continue
        checked += 1
        s_step, w_step = json.loads(short.stdout)["step_time_s"], json.loads(whole.stdout)["step_time_s"]
        if s_step != w_step:
            failures.append(f"simulate {' '.join(flags)}: step {s_step} s, but {w_step} s simulated whole")
    return checked


# recommend --framework F: the export targets that framework runs (export --to).
FRAMEWORK_TARGETS = {"megatron-core": ("megatron",), "megatron-lm": ("megatron",), "deepspeed": ("deepspeed",),
                     "torchtitan": ("torchtitan", "torchtitan-py"), "pytorch": ("fsdp",)}
# The built-in models small enough for a search in about a second on this machine's cores.
SEARCH_MODELS = ("gpt-0.35b", "gpt3-1.3b", "gpt3-2.7b", "gpt-18b", "gpt-22b", "llama2-7b", "llama2-13b",
                 "llama2-70b", "llama3-8b", "llama3-70b", "mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b")


def one_line_refusal(r, what, failures):
    """A refusal is one 'trainplan: ' line on stderr and nothing on stdout (oracle 1)."""
    if r.stdout or len(r.stderr.strip().splitlines()) != 1 or not r.stderr.startswith("trainplan: "):
        failures.append(f"{what}: a refusal must be one 'trainplan: ' line and no stdout: {r.stderr[:300]!r}")


def check_exports(a, what, plan_path, out_path, target, gpus, nodes, run, failures):
    """Exports plan_path to target and runs the framework's oracle on it: 'ok', 'refused' or 'failed'."""
    e = run([a.trainplan, "export", "--plan", plan_path, "--to", target])
    if e is None:
        return "failed"
    if e.returncode == 2:
        one_line_refusal(e, f"export --to {target} of {what}", failures)
        return "refused"
    if e.returncode != 0:
        failures.append(f"export --to {target} of {what}: exit {e.returncode}: {e.stderr[-300:]}")
        return "failed"
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(e.stdout)
    if target in ("torchtitan", "torchtitan-py"):
        check = [sys.executable, TITAN, "--plan", plan_path, "--file", out_path, "--world", str(gpus)]
        if target == "torchtitan-py":
            check += ["--format", "python"]
    else:
        check = [sys.executable, ORACLE, "--target", target, "--plan", plan_path, "--file", out_path,
                 "--nodes", str(nodes)]
    o = run(check)
    if o is not None and o.returncode != 0:
        failures.append(f"export --to {target} of {what}: the oracle refuses it: {o.stdout.strip()[:500]}")
        return "failed"
    return "ok"


def check_recommended(a, run, rng, failures, clusters, work):
    """Draws recommend searches per framework; each best plan's exports must be accepted; returns the count."""
    accepted = 0
    plan_path = os.path.join(work, "recommended.json")
    for k in range(a.recommends):
        framework = sorted(FRAMEWORK_TARGETS)[k % len(FRAMEWORK_TARGETS)]
        cname = rng.choice(sorted(c for c in clusters if c != "cpu-local"))
        host = clusters[cname].get("host", {}).get("gpus") or clusters[cname]["gpus_per_node"]
        gpus = host * rng.choice([1, 2, 4])
        args = ["recommend", "--model", rng.choice(SEARCH_MODELS), "--cluster", cname, "--gpus", str(gpus),
                "--framework", framework, "--top", "1", "--save", plan_path]
        if rng.random() < 0.5:
            args += ["--gbs", str(gpus * rng.choice([1, 2, 4, 8]))]
        if rng.random() < 0.3:
            args += ["--precision", rng.choice(["fp8", "fp16"])]
        if rng.random() < 0.3:
            args += ["--strategies", rng.choice(["zero-bubble", "offload", "gpipe"])]
        if os.path.exists(plan_path):
            os.remove(plan_path)
        what = " ".join(args)
        r = run([a.trainplan] + args, timeout=300)
        if r is None or r.returncode == 2:
            continue  # a search refused in one line (e.g. FP8 on a GPU without it): the CLI contract, checked above
        if r.returncode != 0:
            failures.append(f"{what}: exit {r.returncode}: {r.stderr[-300:]}")
            continue
        if not os.path.exists(plan_path):
            continue  # nothing fits: nothing to launch
        for target in FRAMEWORK_TARGETS[framework]:
            verdict = check_exports(a, what, plan_path, os.path.join(work, "recommended." + target), target, gpus,
                                    max(1, gpus // host), run, failures)
            # torchtitan's head (Python) config has no float8 converter: its refusal names the TOML target.
            accepted += verdict == "ok"
            if verdict == "refused" and os.environ.get("TRAINPLAN_RANDOM_VERBOSE"):
                print(f"refused: export --to {target} of {what}")
    return accepted


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trainplan")
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--plans", type=int, default=1000)
    ap.add_argument("--exports", type=int, default=40, help="saved plans whose exports are checked")
    ap.add_argument("--faults", type=int, default=60, help="failure models drawn")
    ap.add_argument("--steady", type=int, default=30, help="long steps checked against the whole run")
    ap.add_argument("--recommends", type=int, default=10, help="recommend searches whose best plan is exported")
    a = ap.parse_args()
    env = dict(os.environ, TRAINPLAN_DATA_DIR=os.environ.get("TRAINPLAN_DATA_DIR", REPO))
    models, clusters = load("models/*.json"), load("topologies/*.json")
    rng = random.Random(a.seed)
    failures = []
    counts = {"simulated": 0, "cannot_run": 0, "refused": 0, "equal": 0, "bounded": 0, "exported": 0, "export_refused": 0}
    work = tempfile.mkdtemp(prefix="trainplan-random-")

    def run(args, timeout=120):
        try:
            return subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            failures.append("timeout: " + " ".join(args[1:]))
            return None


    saved = 0
    for i in range(a.plans):
        flags = random_flags(rng, models, clusters)
        if flags is None:
            continue
        plan_path = os.path.join(work, f"plan{i}.json")
        save = saved < a.exports and rng.random() < 0.5
        r = run([a.trainplan, "simulate"] + flags + (["--save", plan_path] if save else []))
        what = "simulate " + " ".join(flags)
        if r is None:
            continue
        if r.returncode == 2:
            counts["refused"] += 1
            one_line_refusal(r, what, failures)
            continue
        if r.returncode != 0:
            failures.append(f"{what}: exit {r.returncode}: {r.stderr[-300:]}")
            continue
        if "\nthis plan cannot run:\n" in r.stdout:
            # A plan that cannot run is an answer, not bad input: exit 0 with the reasons (cli_test.sh).
            counts["cannot_run"] += 1
            if not re.search(r"^this plan cannot run:\n  - \S", r.stdout, re.M):
                failures.append(f"{what}: 'cannot run' without a reason")
            continue
        counts["simulated"] += 1
        peaks = stage_peaks(r.stdout)
        if not peaks:
            failures.append(f"{what}: no memory table")
        equal = schedule_of(r.stdout) in EQUAL_SCHEDULES
        for stage, sim, closed in peaks:
            # GiB printed to 0.01: allow the rounding of both.
            if sim > closed * 1.001 + 0.011:
                failures.append(f"{what}: stage {stage} simulated {sim} GiB above the closed form {closed}")
            if equal and abs(sim - closed) > closed * 0.001 + 0.011:
                failures.append(f"{what}: stage {stage} simulated {sim} GiB != closed form {closed}")
        counts["equal" if equal else "bounded"] += 1
        if i % 10 == 0 and not save:
            again = run([a.trainplan, "simulate"] + flags)
            if again is not None and again.stdout != r.stdout:
                failures.append(f"{what}: the same plan simulated twice printed different output")
        if not save or not os.path.exists(plan_path):
            continue
        saved += 1
        # The saved plan read back simulates as its flags did (the header's
        # config hash names the question, flags or file).
        back = run([a.trainplan, "simulate", "--plan", plan_path])
        if back is not None:
            body = lambda text: [ln for ln in text.splitlines()
                                 if not ln.startswith(("# trainplan ", "# config", "saved the plan"))]
            if back.returncode != 0 or body(back.stdout) != body(r.stdout):
                failures.append(f"{what}: simulate --plan of the saved plan differs from the flags' simulation")
        gpus = int(flags[flags.index("--gpus") + 1])
        cluster = clusters[flags[flags.index("--cluster") + 1]]
        host = cluster.get("host", {}).get("gpus") or cluster["gpus_per_node"]
        nodes = max(1, gpus // host)
        for target in TARGETS:
            verdict = check_exports(a, what, plan_path, os.path.join(work, f"out{i}.{target}"), target, gpus, nodes,
                                    run, failures)
            if verdict == "refused":
                counts["export_refused"] += 1
            elif verdict == "ok":
                counts["exported"] += 1
    faults = check_faults(a, run, rng, failures)
    steady = check_steady(a, run, rng, failures, models, clusters, work)
    # A stream of its own, so that the searches drawn do not shift when the plan draws above change.
    recommended = check_recommended(a, run, random.Random(a.seed + 1), failures, clusters, work)
    print("random plans (seed %d): %s; failure models checked %d; long steps against the whole run %d; "
          "exports of recommended plans accepted %d" %
          (a.seed, ", ".join(f"{k} {v}" for k, v in counts.items()), faults, steady, recommended))
    if recommended < a.recommends // 2:
        failures.append(f"the sample is too thin: exports of recommended plans {recommended} < {a.recommends // 2}")
    if faults < a.faults // 3:
        failures.append(f"the sample is too thin: failure models {faults} < {a.faults // 3}")
    if steady < a.steady // 2:
        failures.append(f"the sample is too thin: long steps {steady} < {a.steady // 2}")
    # The sample must reach what it is for: simulated plans of both memory kinds, and accepted exports.
    for key, least in (("simulated", a.plans // 4), ("equal", a.plans // 10), ("bounded", a.plans // 40),
                        ("exported", a.exports // 6)):
        if counts[key] < least:
            failures.append(f"the sample is too thin: {key} {counts[key]} < {least}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

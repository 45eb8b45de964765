#!/usr/bin/env python3
"""A wider check than the dev rows: every run of Megatron-Bridge's published performance tables that trainplan
can express, predicted at its printed layout.  Not the judged comparison (ACCURACY.md's rows are), and nothing
here is fitted: it says how the model carries to many more published runs of the kinds the dev rows sample.

Facts: tests/data/validation/megatron_bridge_perf.json, the tables of NVIDIA-NeMo/Megatron-Bridge
docs/performance-summary.md and docs/performance-summary-archive.md at commit 067f987df0 (NeMo containers 25.09 to
26.08), one entry per printed row with its first configuration (a value in parentheses is a second configuration
of the same row, kept under "second_configuration", not predicted).

Mapping, the ACCURACY.md rules as far as the tables print the fields:
  model     the built-in model of the printed name (the tables print no shapes; M1/M4 would need them):
            LLAMA3_8B llama3-8b, LLAMA3_70B llama3-70b, LLAMA3.1_405B llama3-405b, DeepSeekV3 deepseek-v3
            (no MTP layer), GPT OSS 120B gpt-oss-120b, Qwen3_30B_a3B qwen3-30b-a3b, Qwen3_235B_a22B
            qwen3-235b-a22b; a suffix in parentheses (tokendrop, w/o MTP) is ignored; other models (Nemotron 3,
            Kimi K2, DeepSeek-V4) are not expressible.
  cluster   DGX-H100 dgx-h100, DGX-B200 dgx-b200, DGX-B300 dgx-b300, DGX-GB200 gb200-nvl72, DGX-GB300
            gb300-nvl72.
  layout    --gpus --tp --pp --cp --vp (n/a: none) --mbs --gbs --seq as printed; --ep and --etp (printed, else 1,
            the perf recipes' expert_tensor_parallel_size) for MoE models; FSDP column > 0 -> --zero 3
            (Megatron-FSDP, L2), else the distributed optimizer, --zero 1; recompute and sequence parallelism are
            not printed -> none and off (L5, L6); --attention flash (L10); --framework megatron-core (F1).
  precision FP8-CS / FP8-MX / MXFP8 / FP8 -> --precision fp8 (L9); BF16 -> bf16; NVFP4 not expressible; the 25.09
            tables print no precision column: fp8, as the dev row mbridge_25.09_h100_Qwen3_30B_A3B_16gpu_tokendrop
            infers.
  metric    tokens/s per GPU (a pure time comparison); error (pred - meas) / meas, + = optimistic.

Usage: python3 tools/megatron_bridge_check.py [--out docs/megatron-bridge-check.md]  (after building)
"""
import argparse
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accuracy  # noqa: E402  (run, cli_offers: the same CLI calls as the judged comparison)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FACTS = os.path.join(ROOT, "tests", "data", "validation", "megatron_bridge_perf.json")

MODELS = {"LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3-405b",
          "DeepSeekV3": "deepseek-v3", "GPT OSS 120B": "gpt-oss-120b", "Qwen3_30B_a3B": "qwen3-30b-a3b",
          "Qwen3_235B_a22B": "qwen3-235b-a22b"}
MOE = {"deepseek-v3", "gpt-oss-120b", "qwen3-30b-a3b", "qwen3-235b-a22b"}
SYSTEMS = {"DGX-H100": "dgx-h100", "DGX-B200": "dgx-b200", "DGX-B300": "dgx-b300", "DGX-GB200": "gb200-nvl72",
           "DGX-GB300": "gb300-nvl72"}
# The fields that make two printed rows the same run configuration (for the repeat spread).
LAYOUT_KEYS = ("system", "model", "precision", "gpus", "gbs", "mbs", "seq", "tp", "pp", "cp", "vp", "ep", "etp", "fsdp")


def model_of(row):
    return MODELS.get(re.sub(r"\s*\(.*\)\s*$", "", row["model"]).strip())


def precision_of(row):
    """The row's precision as the CLI spells it, or None where it is not expressible."""
    text = (row.get("precision") or ("FP8" if row["container"] == "25.09" else "BF16")).upper()
    if "FP4" in text:
        return None
    return "fp8" if "FP8" in text else "bf16"


def flags_for(row, trainplan):
    """The simulate flags of a row (the mapping in the docstring), or (None, reason)."""
    model, cluster, precision = model_of(row), SYSTEMS.get(row["system"]), precision_of(row)
    if not model:
        return None, "model not built in"
    if not cluster:
        return None, "system not built in"
    if not precision:
        return None, "precision " + str(row.get("precision"))
    f = ["--model", model, "--cluster", cluster, "--gpus", str(row["gpus"]), "--tp", str(row.get("tp") or 1),
         "--pp", str(row.get("pp") or 1), "--mbs", str(row["mbs"]), "--gbs", str(row["gbs"]), "--seq",
         str(row["seq"]), "--attention", "flash", "--recompute", "none"]
    if (row.get("cp") or 1) > 1:
        f += ["--cp", str(row["cp"])]
    if (row.get("vp") or 1) > 1:
        f += ["--vp", str(row["vp"])]
    if model in MOE:
        f += ["--ep", str(row.get("ep") or 1), "--etp", str(row.get("etp") or 1)]
    f += ["--zero", "3" if (row.get("fsdp") or 0) > 0 else "1"]
    if precision == "fp8":
        f += ["--precision", "fp8"]
    if accuracy.cli_offers(trainplan, "--framework"):
        f += ["--framework", "megatron-core"]
    return f, None


def summary(errs):
    a = sorted(abs(e) for e in errs)
    n = len(a)
    return "%d | %.1f%% | %+.1f%% | %.1f%% | %d" % (n, 100 * sum(a) / n, 100 * sum(errs) / n, 100 * a[n // 2],
                                                   sum(x <= 0.15 for x in a))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainplan", default=os.path.join(ROOT, "build", "planner", "trainplan"))
    ap.add_argument("--facts", default=FACTS)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "megatron-bridge-check.md"))
    a = ap.parse_args()
    rows = json.load(open(a.facts))["rows"]
    results, skipped = [], {}
    for row in rows:
        flags, reason = flags_for(row, a.trainplan)
        if flags is None:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        try:
            res = accuracy.run(a.trainplan, flags)
        except RuntimeError as e:
            skipped["refused: " + str(e).splitlines()[0][:90]] = skipped.get("refused: " + str(e)[:90], 0) + 1
            continue
        if not res.get("valid", True):
            reason = "invalid: " + "; ".join(res.get("reasons", []))[:90]
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        pred = res["tokens_per_s"] / res["gpus"]
        meas = row["tokens_per_s_per_gpu"]
        results.append((row, flags, meas, pred, (pred - meas) / meas, bool(res.get("fits"))))

    errs = [r[4] for r in results]
    doc = ["# A wider check: Megatron-Bridge's published performance tables", "",
           "Generated by `python3 tools/megatron_bridge_check.py` (after building). Every row of",
           "NVIDIA-NeMo/Megatron-Bridge's performance tables (NeMo containers 25.09 to 26.08, commit 067f987df0;",
           "facts in `tests/data/validation/megatron_bridge_perf.json`) that trainplan can express, predicted at",
           "its printed layout with the ACCURACY.md rules as far as the tables print the fields (the script's",
           "docstring). Not the judged comparison (`docs/accuracy.md`) and nothing here is fitted: it shows how the",
           "model carries to many more published runs. Error = (predicted - measured) / measured tokens/s per GPU,",
           "+ = optimistic. `fits` is trainplan's memory verdict (the tables print no recompute or gradient dtype,",
           "which the recipes set, so a run that ran may not fit as mapped).", "",
           "**Summary:** %d rows predicted; MAPE %.1f%%, bias %+.1f%%, median |error| %.1f%%, %d within 15%%." % (
               len(errs), 100 * sum(abs(e) for e in errs) / len(errs), 100 * sum(errs) / len(errs),
               100 * statistics.median(abs(e) for e in errs), sum(abs(e) <= 0.15 for e in errs)), ""]

    # The measurement's own spread: the same printed configuration in several containers.
    same = {}
    for row in rows:
        if precision_of(row) is None:
            continue
        key = tuple(precision_of(row) if k == "precision" else row.get(k) for k in LAYOUT_KEYS)
        same.setdefault(key, []).append(row["tokens_per_s_per_gpu"])
    repeats = sorted(max(v) / min(v) for v in same.values() if len(v) > 1)
    if repeats:
        doc += ["**The tables' own spread.** %d configurations are printed in more than one container release "
                "(same system, model, precision as mapped and layout); their measured tokens/s differ by a median factor "
                "of "
                "%.2f and up to %.2f (max / min; %d of them by more than 15%%). Mostly the tables repeat themselves: "
                "most of a row's error is the model's, but a few configurations changed by up to that factor between "
                "releases with nothing in the printed fields to say why (the recipes' recompute, dispatcher, CUDA "
                "graphs and overlaps are not printed)." % (len(repeats), statistics.median(repeats), repeats[-1], sum(r > 1.15 for r in repeats)), ""]

    for title, key in (("By model", lambda r: r[0]["model"].split(" (")[0]), ("By system", lambda r: r[0]["system"]),
                       ("By precision", lambda r: precision_of(r[0]))):
        groups = {}
        for r in results:
            groups.setdefault(key(r), []).append(r[4])
        doc += ["## " + title, "", "| group | rows | MAPE | bias | median | within 15% |", "|---|---:|---:|---:|---:|---:|"]
        doc += ["| %s | %s |" % (g, summary(groups[g])) for g in sorted(groups)]
        doc.append("")

    doc += ["## Rows", "", "| container | system | model | precision | measured tok/s/GPU | predicted | error | fits | flags |",
            "|---|---|---|---|---:|---:|---:|---|---|"]
    for row, flags, meas, pred, err, fits in results:
        short = " ".join(flags[4:])
        doc.append("| %s | %s | %s | %s | %.0f | %.0f | %+.1f%% | %s | `%s` |" % (
            row["container"], row["system"], row["model"], row.get("precision") or "(not printed)", meas, pred,
            100 * err, "yes" if fits else "no", flags[1] + " " + short))
    doc += ["", "Not predicted: " + (", ".join("%s (%d rows)" % (k, v) for k, v in sorted(skipped.items())) or "none"),
            ""]
    text = "\n".join(doc)
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, a.out)
    print("wrote %s: %d rows, MAPE %.1f%%, bias %+.1f%%" % (a.out, len(errs), 100 * sum(abs(e) for e in errs) / len(errs),
                                                          100 * sum(errs) / len(errs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

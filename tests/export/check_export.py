#!/usr/bin/env python3
"""Independent oracle for `trainplan export` output.

Checks an exported config against each framework's OWN rules, kept as data in
tests/data/frameworks/*.json (read from the frameworks' sources; each file
names the repository and commit) and, for the rules that are code in the
frameworks (validate_args, config assertions), re-implemented below with a
comment naming the source file and function each comes from.

    check_export.py --target megatron|deepspeed|fsdp --plan PLAN.json \
        --file EXPORTED [--nodes N] [--data-dir DIR]

Exit 0 when every check passes; otherwise one line per problem on stdout and
exit 1 (exit 2 on bad usage or unreadable input).  Python 3.11, stdlib only.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
DEFAULT_DATA = os.path.join(REPO, "tests", "data", "frameworks")


class Problems:
    def __init__(self, path: str):
        self.path = path
        self.items: list[str] = []

    def add(self, msg: str, line: int | None = None) -> None:
        where = f"{self.path}:{line}" if line else self.path
        text = f"{where}: {msg}"
        if text not in self.items:
            self.items.append(text)


# ---------------------------------------------------------------------------
# Plan


def cluster_doc(cluster: str | None) -> dict | None:
    """The plan's built-in cluster file (topologies/<name>.json), or None."""
    path = os.path.join(REPO, "topologies", f"{cluster}.json")
    if not cluster or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def model_doc(model: str | None) -> dict | None:
    """The plan's model file: a path as given (containing '/' or ending in .json), else the built-in
    models/<name>.json; None when there is none."""
    if not model:
        return None
    path = model if ("/" in model or model.endswith(".json")) else os.path.join(REPO, "models", f"{model}.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def gpus_per_host(cluster: str | None) -> int | None:
    """GPUs one host of the plan's built-in cluster drives (topologies/<name>.json: host.gpus, else
    gpus_per_node); None for a cluster that is not built in."""
    c = cluster_doc(cluster)
    return None if c is None else int(c.get("host", {}).get("gpus", c["gpus_per_node"]))


def load_plan(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        p = json.load(f)
    out = {
        "gpus_per_host": gpus_per_host(p.get("cluster")),
        "tp": int(p.get("tp", 1)),
        "pp": int(p.get("pp", 1)),
        "cp": int(p.get("cp", 1)),
        "vp": int(p.get("vp", 1)),
        "zero": int(p.get("zero", 0)),
        "mbs": int(p.get("mbs", 1)),
        "seq": int(p.get("seq", 0)),
        "sp": bool(p.get("sp", False)),
        "precision": p.get("precision", "bf16"),
        "fp8_recipe": p.get("fp8_recipe"),
        "grad_dtype": p.get("grad_dtype", "fp32"),
        "moment_dtype": p.get("moment_dtype", "fp32"),
        "recompute": p.get("recompute", "none"),
        "offload": p.get("offload", "none"),
        "schedule": p.get("schedule", "1f1b"),
        "model": p.get("model", ""),
        "cluster": p.get("cluster", ""),
        "stage_layers": list(p.get("stage_layers") or []),
        "shard_group": int(p.get("shard_group", 0) or 0),
        "ep": int(p.get("ep", 1)),
        "recompute_modules": list(p.get("recompute_modules") or []),
        "recompute_layers": int(p.get("recompute_layers", 0) or 0),
        "ep_overlap": bool(p.get("ep_overlap", False)),
        "mtp_layers": int(p.get("mtp_layers", 0) or 0),
        "delay_wgrad": bool(p.get("delay_wgrad", False)),
        "moe_dispatcher": p.get("moe_dispatcher", "alltoall"),
        "moe_pad_to_capacity": bool(p.get("moe_pad_to_capacity", False)),
        "moe_router_fusion": bool(p.get("moe_router_fusion", False)),
        "moe_shared_expert_overlap": bool(p.get("moe_shared_expert_overlap", False)),
        "cross_entropy_fusion": bool(p.get("cross_entropy_fusion", False)),
        "cuda_graph": list(p.get("cuda_graph") or []),
        "cp_comm_type": p.get("cp_comm_type", "p2p"),
    }
    out["etp"] = int(p.get("etp", out["tp"]))
    tp, pp, cp = out["tp"], out["pp"], out["cp"]
    gpus = p.get("gpus")
    dp = p.get("dp")
    if dp is None and gpus is not None:
        dp = int(gpus) // (tp * pp * cp)
    out["dp"] = int(dp if dp is not None else 1)
    out["gpus"] = int(gpus) if gpus is not None else tp * pp * cp * out["dp"]
    out["gbs"] = int(p.get("gbs", out["mbs"] * out["dp"]))
    return out


def gpu_arch_major(cluster: str) -> tuple[int, str]:
    """CUDA compute capability major of the cluster's GPU, from the repo's
    topologies/<cluster>.json GPU name.  Megatron's get_device_arch_version()
    is torch.cuda.get_device_capability()[0] (megatron/training/utils.py)."""
    name = ""
    path = os.path.join(REPO, "topologies", f"{cluster}.json")
    try:
        with open(path, encoding="utf-8") as f:
            name = json.load(f).get("gpu", {}).get("name", "")
    except (OSError, ValueError):
        pass
    table = [("GB300", 10), ("B300", 10), ("GB200", 10), ("B200", 10), ("B100", 10), ("H200", 9), ("H100", 9), ("H800", 9),
             ("A100", 8), ("A800", 8), ("RTX4090", 8), ("L40", 8), ("A10", 8), ("V100", 7)]
    for key, major in table:
        if key in name.upper().replace("-", "").replace(" ", "") or key in name.upper():
            return major, name
    return 9, name or "unknown GPU (assumed before Blackwell)"


# ---------------------------------------------------------------------------
# Bash


BASH_EXPANSION = re.compile(r"^\$\{(\w+)(?:(:?[-?=+])(.*))?\}$", re.S)
BASH_SIMPLE_VAR = re.compile(r"^\$(\w+)$")
ARRAY_REF = re.compile(r'^\$\{(\w+)\[@\]\}$')


class Unknown:
    """A value only known at run time (an environment variable without default)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def bash_syntax(path: str, P: Problems) -> bool:
    r = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
    if r.returncode != 0:
        lines = [l for l in r.stderr.splitlines() if l.strip()] or [f"exit status {r.returncode}"]
        for l in lines:
            l = re.sub(r"^.*?: (line \d+:)", r"\1", l)
            P.add(f"bash -n: {l}")
        return False
    return True


def apostrophe_in_expansion(text: str, P: Problems) -> None:
    # Inside a double-quoted "${VAR:?word}" / "${VAR:-word}", bash still
    # treats a single quote in `word` as opening a quoted string, so an
    # apostrophe ("node's") leaves the quote unterminated (bash -n fails).
    for n, line in enumerate(text.splitlines(), 1):
        for m in re.finditer(r'"\$\{\w+:?[-?=+]([^}]*)\}"', line):
            if m.group(1).count("'") % 2 == 1:
                P.add(f"apostrophe inside the double-quoted expansion {m.group(0)!s}: bash reads it as an "
                      "unterminated single quote", n)


class BashScript:
    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines()
        self.vars: dict[str, object] = {}
        self.env: dict[str, object] = {}  # exported value, or None when unset
        self.arrays: dict[str, list[tuple[int, list[str]]]] = {}
        self.heredocs: list[dict] = []
        self.command: list[tuple[int, str]] = []  # (line, token) of the launcher line
        self.tokenize_errors: list[tuple[int, str]] = []
        self._parse()

    def resolve(self, tok: str):
        m = BASH_EXPANSION.match(tok)
        if m:
            name, op, word = m.group(1), m.group(2), m.group(3)
            if name in self.vars and op in (None, ":-", "-", ":=", "="):
                return self.vars[name]
            if op in (":-", "-", ":=", "="):
                return word
            return Unknown(tok)
        m = BASH_SIMPLE_VAR.match(tok)
        if m:
            return self.vars.get(m.group(1), Unknown(tok))
        return tok

    def _split(self, n: int, s: str) -> list[str]:
        try:
            return shlex.split(s, comments=True, posix=True)
        except ValueError as e:
            self.tokenize_errors.append((n, f"{e}: {s.strip()}"))
            return s.split()

    def _parse(self) -> None:
        i = 0
        L = self.lines
        while i < len(L):
            n, line = i + 1, L[i]
            s = line.strip()
            i += 1
            if not s or s.startswith("#"):
                continue
            m = re.match(r'^cat\s+>\s*("?)(\$?\{?\w+\}?|[\w./-]+)\1\s+<<-?\s*([\'"]?)(\w+)\3\s*$', s)
            if m:
                body = []
                start = i + 1
                while i < len(L) and L[i].strip() != m.group(4):
                    body.append(L[i])
                    i += 1
                i += 1
                self.heredocs.append({"target": self.resolve(m.group(2)), "target_text": m.group(2),
                                      "body": "\n".join(body), "line": start})
                continue
            m = re.match(r"^(\w+)=\($", s)
            if m:
                items = []
                while i < len(L) and L[i].strip() != ")":
                    t = L[i].strip()
                    if t and not t.startswith("#"):
                        items.append((i + 1, self._split(i + 1, t)))
                    i += 1
                i += 1
                self.arrays[m.group(1)] = items
                continue
            m = re.match(r"^export\s+(\w+)=(.*)$", s)
            if m:
                toks = self._split(n, m.group(2))
                self.env[m.group(1)] = self.resolve(toks[0]) if toks else ""
                continue
            m = re.match(r"^unset\s+(.+)$", s)
            if m:
                for v in m.group(1).split():
                    self.env[v] = None
                continue
            m = re.match(r"^(\w+)=(.*)$", s)
            if m:
                toks = self._split(n, m.group(2))
                self.vars[m.group(1)] = self.resolve(toks[0]) if toks else ""
                continue
            if re.match(r"^(torchrun|deepspeed|python3?|srun)\b", s):
                joined, first = s, n
                while joined.endswith("\\") and i < len(L):
                    joined = joined[:-1] + " " + L[i].strip()
                    i += 1
                self.command = [(first, t) for t in self._split(first, joined)]

    def expand(self, toks: list[tuple[int, str]]) -> list[tuple[int, str]]:
        out = []
        for n, t in toks:
            m = ARRAY_REF.match(t)
            if m and m.group(1) in self.arrays:
                for ln, items in self.arrays[m.group(1)]:
                    out.extend((ln, x) for x in items)
            else:
                out.append((n, t))
        return out

    def launcher_split(self):
        """(launcher name, launcher args, script name, script args) of the launch line."""
        if not self.command:
            return None
        name = self.command[0][1]
        rest = self.expand(self.command[1:])
        pre, post, script = [], [], None
        for n, t in rest:
            if script is None and not t.startswith("-") and not (pre and self._takes_value(pre)):
                script = (n, t)
                continue
            (pre if script is None else post).append((n, t))
        return name, pre, script, post

    @staticmethod
    def _takes_value(pre):
        # The token before a script name is a flag that takes a value
        # ("--nnodes 4"): values do not start with "-".
        last = pre[-1][1]
        return last.startswith("-") and "=" not in last and last not in ("--standalone", "-m", "--module",
                                                                            "--no-python", "--no_python",
                                                                            "--run-path", "--run_path")


def group_args(tokens: list[tuple[int, str]]):
    """[(line, flag, [values])] from a stream of "--flag value" tokens."""
    out = []
    for n, t in tokens:
        if t == "$@":
            continue
        if t.startswith("-") and not re.match(r"^-\d", t):
            if "=" in t and t.startswith("--"):
                f, v = t.split("=", 1)
                out.append([n, f, [v]])
            else:
                out.append([n, t, []])
        elif out:
            out[-1][2].append(t)
        else:
            out.append([n, None, [t]])
    return out


def check_args(script: BashScript, tokens, table: dict, allow_abbrev: bool, who: str, P: Problems):
    """Validate flags against an argparse table; returns (namespace, given)."""
    ns: dict[str, object] = {}
    given: dict[str, tuple[int, str, list]] = {}  # dest -> (line, flag, raw values)
    for n, flag, raw in group_args(tokens):
        if flag is None:
            P.add(f"{who}: stray value {' '.join(raw)!r} before any flag", n)
            continue
        spec = table.get(flag)
        if spec is None and allow_abbrev and flag.startswith("--"):
            hits = [k for k in table if k.startswith(flag)]
            if len({table[k]["dest"] for k in hits}) == 1:
                spec = table[hits[0]]
        if spec is None:
            P.add(f"{who}: unknown argument {flag}", n)
            continue
        dest = spec["dest"]
        if dest in given:
            P.add(f"{who}: {flag} given twice (also line {given[dest][0]} as {given[dest][1]})", n)
        given[dest] = (n, flag, raw)
        values = [script.resolve(v) for v in raw]
        typ = spec["type"]
        if typ == "flag":
            if raw:
                P.add(f"{who}: {flag} is a flag and takes no value, got {' '.join(raw)!r}", n)
            ns[dest] = spec.get("sets", True)
            continue
        nargs = spec.get("nargs")
        count_ok = {None: len(values) == 1, "?": len(values) <= 1, "+": len(values) >= 1,
                    "*": True}.get(nargs, len(values) == nargs if isinstance(nargs, int) else True)
        if not count_ok:
            want = "one value" if nargs is None else f"nargs={nargs}"
            P.add(f"{who}: {flag} takes {want}, got {len(values)} ({' '.join(raw)!r})", n)
        conv = []
        for v in values:
            if isinstance(v, Unknown):
                conv.append(v)
                continue
            try:
                c = int(v) if typ == "int" else float(v) if typ == "float" else v
            except ValueError:
                P.add(f"{who}: {flag} {v!r} is not a valid {typ}", n)
                conv.append(Unknown(v))
                continue
            choices = spec.get("choices")
            if choices is not None and c not in choices and str(c) not in [str(x) for x in choices]:
                P.add(f"{who}: {flag} {v!r} is not one of {choices}", n)
            conv.append(c)
        ns[dest] = conv if nargs in ("+", "*") or isinstance(nargs, int) else (conv[0] if conv else None)
    full = {}
    for spec in table.values():
        if "dest" in spec and spec["dest"] not in full:
            full[spec["dest"]] = spec.get("default")
    full.update(ns)
    return full, given


def known(v) -> bool:
    return v is not None and not isinstance(v, Unknown)


def check_torchrun(script: BashScript, tor_table: dict, plan: dict, nodes_opt: int | None, P: Problems):
    sp = script.launcher_split()
    if sp is None:
        P.add("no launcher line (torchrun ...) found")
        return None
    name, pre, scr, post = sp
    if name != "torchrun":
        P.add(f"launcher is {name!r}, expected torchrun")
        return None
    if scr is None:
        P.add("torchrun: no training script on the launch line")
    ns, given = check_args(script, pre, tor_table["args"], tor_table.get("allow_abbrev", True), "torchrun", P)
    # torch/distributed/run.py parse_min_max_nnodes + config_from_args:
    # --nnodes is "N" or "MIN:MAX" with 0 < MIN <= MAX.
    nnodes = ns.get("nnodes")
    line = given.get("nnodes", (None,))[0]
    n_min = n_max = None
    if known(nnodes):
        parts = str(nnodes).split(":")
        try:
            if len(parts) == 1:
                n_min = n_max = int(parts[0])
            elif len(parts) == 2:
                n_min, n_max = int(parts[0]), int(parts[1])
            else:
                raise ValueError
            if not 0 < n_min <= n_max:
                P.add(f"torchrun: --nnodes {nnodes}: needs 0 < min <= max (run.py config_from_args)", line)
        except ValueError:
            P.add(f"torchrun: --nnodes {nnodes!r} is not N or MIN:MAX (run.py parse_min_max_nnodes)", line)
    # run.py determine_local_world_size: an int, or cpu/gpu/xpu/auto.
    nproc = ns.get("nproc_per_node")
    nproc_i = None
    if known(nproc):
        try:
            nproc_i = int(nproc)
        except ValueError:
            if nproc not in ("cpu", "gpu", "xpu", "auto"):
                P.add(f"torchrun: --nproc-per-node {nproc!r} is not an int or cpu|gpu|xpu|auto "
                      "(run.py determine_local_world_size)", given.get("nproc_per_node", (None,))[0])
    # Megatron-LM initialize.py _initialize_distributed and PyTorch's own
    # scripts give each local rank its device, torch.cuda.set_device(local_rank):
    # a host runs at most as many processes as it has GPUs.
    gph = plan.get("gpus_per_host")
    if nproc_i is not None and gph is not None and nproc_i > gph:
        P.add(f"torchrun: --nproc-per-node {nproc_i} but a host of {plan.get('cluster')} has {gph} GPUs "
              "(torch.cuda.set_device(local_rank): the local ranks beyond them have no device)",
              given.get("nproc_per_node", (None,))[0])
    nodes = n_max
    if nodes_opt is not None:
        if n_max is not None and n_max != nodes_opt:
            P.add(f"torchrun: --nnodes {nnodes} but the job has {nodes_opt} nodes", line)
        nodes = nodes_opt
    if nproc_i is not None and nodes is not None and nproc_i * nodes != plan["gpus"]:
        P.add(f"torchrun: {nodes} nodes x --nproc-per-node {nproc_i} = {nodes * nproc_i} processes, "
              f"the plan has {plan['gpus']} GPUs")
    # Static rendezvous (run.py: rdzv_backend 'static' takes rank = --node-rank and
    # endpoint --master-addr:--master-port): on several nodes each node needs its
    # own rank and all need node 0's address, so neither may fall back to a default.
    static = ns.get("rdzv_backend") in (None, "static")
    if static and nodes is not None and nodes > 1:
        for dest, bad in (("node_rank", None), ("master_addr", ("localhost", "127.0.0.1"))):
            g = given.get(dest)
            if g is None:
                P.add(f"torchrun: --{dest} missing on a {nodes}-node job (static rendezvous needs it on every node)")
                continue
            raw = g[2][0] if g[2] else ""
            m = BASH_EXPANSION.match(raw)
            if m and m.group(2) in (":-", "-", ":=", "="):
                P.add(f"torchrun: {g[1]} {raw!r} falls back to {m.group(3)!r} when the variable is unset, so on a "
                      f"{nodes}-node job the nodes without it all use that value; take it from each node's "
                      "environment with no default (\"${VAR:?message}\")", g[0])
            elif not m and not BASH_SIMPLE_VAR.match(raw):
                P.add(f"torchrun: {g[1]} {raw!r} is the same on every node of a {nodes}-node job; take it from "
                      "each node's environment", g[0])
            elif bad and known(script.resolve(raw)) and script.resolve(raw) in bad:
                P.add(f"torchrun: {g[1]} is {script.resolve(raw)} on a {nodes}-node job", g[0])
    nr = ns.get("node_rank")
    if known(nr) and nodes is not None and not 0 <= int(nr) < nodes:
        P.add(f"torchrun: --node-rank {nr} outside 0..{nodes - 1}", given.get("node_rank", (None,))[0])
    return {"script": scr, "post": post, "nodes": nodes, "nproc": nproc_i}


def hybridep_env_rules(script: BashScript, plan: dict, ep: int, etp: int, P: Problems) -> None:
    """DeepEP's HybridEPBuffer reads NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN (the expert-parallel group must be
    whole domains: "The number of ranks ... should be divisible by the number of ranks per NVLink domain") and
    USE_MNNVL (NVLink peers on other hosts, as NVIDIA's GB200 recipes set it: 64 ranks per domain with USE_MNNVL=1,
    DGX recipes 8 with 0).  With the plan's cluster: Megatron's expert ranks are ordered tp-ep-dp-pp with the ep
    group etp apart, so min(ep, gpus_per_node // etp) of them share a node's NVLink, and they span hosts when
    that many times etp exceeds a host's GPUs."""
    env = script.env
    n_raw, u_raw = env.get("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"), env.get("USE_MNNVL")
    if n_raw is None or u_raw is None:
        P.add("megatron: the hybridep dispatcher without NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN and USE_MNNVL "
              "exported (HybridEPBuffer reads its NVLink topology from them)")
        return
    try:
        n, u = int(str(n_raw)), int(str(u_raw))
    except ValueError:
        P.add(f"megatron: HybridEP env {n_raw!r}/{u_raw!r} are not integers")
        return
    if n <= 0 or ep % n != 0:
        P.add(f"megatron: NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN={n} does not divide the {ep} expert-parallel ranks "
              "(HybridEPBuffer asserts it)")
    c = cluster_doc(plan.get("cluster"))
    if c is None:
        return
    gpn = int(c["gpus_per_node"])
    host = int(c.get("host", {}).get("gpus", gpn))
    want = min(ep, max(1, gpn // max(1, etp)))
    if n != want:
        P.add(f"megatron: NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN={n}, but {want} expert-parallel ranks share an "
              f"NVLink domain of {plan.get('cluster')} in this plan")
    spans = want * max(1, etp) > host
    if bool(u) != spans:
        P.add(f"megatron: USE_MNNVL={u}, but the NVLink domain's expert ranks " +
              ("span hosts of " if spans else "sit on one host of ") + f"{host} GPUs")


def cuda_max_connections(script: BashScript):
    """'1', another value, None (unset by the script) or 'inherited'."""
    if "CUDA_DEVICE_MAX_CONNECTIONS" not in script.env:
        return "inherited"
    v = script.env["CUDA_DEVICE_MAX_CONNECTIONS"]
    return None if v is None else str(v)


# ---------------------------------------------------------------------------
# Megatron-LM rules


def megatron_switch_is_plans(ns: dict, plan: dict, dest: str, key: str, ln, P: Problems) -> None:
    """Plan consistency of an on/off argument: Megatron's store_true `dest` (argparse's name) is on exactly where the
    plan's boolean `key` is (absent: off)."""
    on, want = bool(ns.get(dest)), plan.get(key, False)
    if on != want:
        P.add(f"megatron: --{dest.replace('_', '-')} is {on}, the plan's {key} is {want}", ln(dest))


def megatron_rules(ns: dict, given: dict, plan: dict, script: BashScript, P: Problems) -> None:
    def ln(dest):
        return given.get(dest, (None,))[0]

    def geti(dest, default=None):
        v = ns.get(dest, default)
        return int(v) if known(v) and not isinstance(v, bool) else default

    world = plan["gpus"]
    tp = geti("tensor_model_parallel_size", 1)
    pp = geti("pipeline_model_parallel_size", 1)
    cp = geti("context_parallel_size", 1)
    mbs = geti("micro_batch_size")
    gbs = geti("global_batch_size")
    layers = geti("num_layers")
    heads = geti("num_attention_heads")
    hidden = geti("hidden_size")

    # arguments.py validate_args: "world size is not divisible by total_model_size"
    # (total_model_size = tp * pp * cp * gtp_weight_remat_size, the last 1 by default).
    model_size = tp * pp * cp
    if world % model_size:
        P.add(f"megatron: world size {world} not divisible by tp*pp*cp = {model_size} (arguments.py validate_args)")
        return
    dp = world // model_size

    # megatron/core/num_microbatches_calculator.py ConstantNumMicroBatchesCalculator:
    # global batch divisible by micro batch * data-parallel size, >= 1 micro-batch.
    if mbs is None:
        P.add("megatron: --micro-batch-size missing (validate_args asserts it is set)")
    elif mbs <= 0:
        P.add(f"megatron: --micro-batch-size {mbs} must be > 0 (validate_args)", ln("micro_batch_size"))
    if gbs is None and mbs:
        gbs = mbs * dp
    microbatches = None
    if mbs and gbs:
        if gbs % (mbs * dp):
            P.add(f"megatron: --global-batch-size {gbs} not divisible by micro batch {mbs} x data-parallel {dp} "
                  "(num_microbatches_calculator.py ConstantNumMicroBatchesCalculator)", ln("global_batch_size"))
        else:
            microbatches = gbs // (mbs * dp)

    # Pipeline layer split.
    nlpvs = geti("num_layers_per_virtual_pipeline_stage")
    nvspr = geti("num_virtual_stages_per_pipeline_rank")
    layout = ns.get("pipeline_model_parallel_layout")
    first = geti("decoder_first_pipeline_num_layers")
    last = geti("decoder_last_pipeline_num_layers")
    # validate_args "Uneven virtual pipeline parallelism": at most one of
    # --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank,
    # --pipeline-model-parallel-layout.
    if sum(x is not None for x in (nlpvs, nvspr, layout)) > 1:
        P.add("megatron: no more than one of --num-layers-per-virtual-pipeline-stage, "
              "--num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout (validate_args)")
    vpp = None
    extra = int(bool(ns.get("account_for_embedding_in_pipeline_split"))) + \
        int(bool(ns.get("account_for_loss_in_pipeline_split")))
    if layers is not None and layout is None:
        if nlpvs is not None:
            # validate_args: --num-layers-per-virtual-pipeline-stage cannot describe
            # uneven stages; layers % pp and layers-per-stage % nlpvs must be 0.
            if first is not None or last is not None:
                P.add("megatron: uneven pipeline stages need --num-virtual-stages-per-pipeline-rank, not "
                      "--num-layers-per-virtual-pipeline-stage (validate_args)", ln("num_layers_per_virtual_pipeline_stage"))
            elif (layers + extra) % pp:
                P.add(f"megatron: --num-layers {layers} not divisible by pipeline size {pp} (validate_args)")
            elif ((layers + extra) // pp) % nlpvs:
                P.add(f"megatron: layers per pipeline stage {(layers + extra) // pp} not divisible by "
                      f"--num-layers-per-virtual-pipeline-stage {nlpvs} (validate_args)",
                      ln("num_layers_per_virtual_pipeline_stage"))
            else:
                vpp = ((layers + extra) // pp) // nlpvs
        elif nvspr is not None:
            vpp = nvspr
            # transformer_block.py get_num_layers_to_build (even stages): layers
            # % pp == 0, and each rank's layers split over its vpp model chunks.
            if first is None and last is None:
                if (layers + extra) % pp:
                    P.add(f"megatron: --num-layers {layers} not divisible by pipeline size {pp} "
                          "(transformer_block.py get_num_layers_to_build)", ln("num_layers"))
                elif ((layers + extra) // pp) % nvspr:
                    P.add(f"megatron: {(layers + extra) // pp} layers per pipeline rank not divisible by "
                          f"--num-virtual-stages-per-pipeline-rank {nvspr} (transformer_block.py)",
                          ln("num_virtual_stages_per_pipeline_rank"))
        elif first is None and last is None and (layers + extra) % pp:
            # validate_args: "Number of layers should be divisible by the pipeline-model-parallel size"
            P.add(f"megatron: --num-layers {layers} not divisible by --pipeline-model-parallel-size {pp} "
                  "(validate_args)", ln("num_layers"))
        if vpp == 1:
            vpp = None
        if first is not None or last is not None:
            # transformer_config.py TransformerConfig.__post_init__ "Uneven PP":
            # first/last > 0 (and divisible by vpp); the middle stages take the
            # rest evenly (and each middle rank's share divisible by vpp).
            rest, stages = layers, pp
            for dest, val in (("decoder_first_pipeline_num_layers", first), ("decoder_last_pipeline_num_layers", last)):
                if val is None:
                    continue
                if val <= 0:
                    P.add(f"megatron: --{dest.replace('_', '-')} {val} must be > 0 (transformer_config.py)", ln(dest))
                if vpp and val % vpp:
                    P.add(f"megatron: --{dest.replace('_', '-')} {val} not divisible by virtual pipeline degree "
                          f"{vpp} (transformer_config.py)", ln(dest))
                rest -= val
                stages -= 1
            if bool(rest) != bool(stages):
                P.add(f"megatron: {rest} middle layers for {stages} middle pipeline stages (transformer_config.py "
                      "uneven PP: both or neither)")
            elif stages and rest % stages:
                P.add(f"megatron: {rest} middle layers not divisible by {stages} middle pipeline stages "
                      "(transformer_config.py uneven PP)")
            elif stages and vpp and (rest // stages) % vpp:
                P.add(f"megatron: {rest // stages} layers per middle pipeline rank not divisible by virtual "
                      f"pipeline degree {vpp} (transformer_config.py uneven PP)")
            if ns.get("account_for_embedding_in_pipeline_split") or ns.get("account_for_loss_in_pipeline_split"):
                P.add("megatron: --decoder-first/last-pipeline-num-layers cannot be combined with "
                      "--account-for-embedding/loss-in-pipeline-split (transformer_config.py)")
        # Plan consistency: the stages Megatron will build are the plan's.
        sl = plan["stage_layers"]
        if sl and len(sl) == pp and layers == sum(sl):
            if first is None and last is None:
                built = [layers // pp] * pp
            else:
                f = first if first is not None else None
                la = last if last is not None else None
                mid_n = pp - (f is not None) - (la is not None)
                mid = (layers - (f or 0) - (la or 0)) // mid_n if mid_n else 0
                built = ([f] if f is not None else []) + [mid] * mid_n + ([la] if la is not None else [])
            if built != sl:
                P.add(f"megatron: Megatron builds pipeline stages of {built} layers, the plan has {sl}")
    if layers is not None and layout is not None:
        # pipeline_parallel_layer_layout.py parse_str_to_list: commas dropped,
        # (X)*n then x*n unrolled, stages split on '|', each character one of
        # E (embedding), L (loss), t (decoder layer), m (MTP layer).
        text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), layout.replace(",", ""))
        text = re.sub(r"(.)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), text)
        stages = text.split("|")
        bad = sorted(set(ch for st in stages for ch in st) - set("ELtm"))
        if bad:
            P.add(f"megatron: --pipeline-model-parallel-layout has invalid layer characters {bad} "
                  "(pipeline_parallel_layer_layout.py)", ln("pipeline_model_parallel_layout"))
        # validate_args / PipelineParallelLayerLayout.__init__: stage count % pp == 0; vpp = stages / pp.
        if len(stages) % pp:
            P.add(f"megatron: --pipeline-model-parallel-layout has {len(stages)} stages, not divisible by "
                  f"pipeline size {pp} (validate_args)", ln("pipeline_model_parallel_layout"))
        else:
            vpp = len(stages) // pp
            flat = "".join(stages)
            # validate_layer_layout: embedding first, loss last, each once; decoder layers = num_layers.
            if not flat.startswith("E") or flat.count("E") != 1:
                P.add("megatron: the layout's first layer must be the embedding E, once (validate_layer_layout)")
            if not flat.endswith("L") or flat.count("L") != 1:
                P.add("megatron: the layout's last layer must be the loss L, once (validate_layer_layout)")
            if flat.count("t") != layers:
                P.add(f"megatron: the layout has {flat.count('t')} decoder layers, --num-layers is {layers} "
                      "(validate_layer_layout)")
            # transformer_config.py: the layout excludes the other pipeline layout arguments.
            if first is not None or last is not None or extra:
                P.add("megatron: --pipeline-model-parallel-layout cannot be set with --decoder-first/last-pipeline-"
                      "num-layers or --account-for-embedding/loss-in-pipeline-split (transformer_config.py)")
            # Plan consistency: rank r builds chunk c = stage c * pp + r; the
            # plan's split is its stage_layers, or where derived, the one the
            # script's header states.
            built = [sum(stages[c * pp + r].count("t") for c in range(vpp)) for r in range(pp)]
            want = plan["stage_layers"]
            if not want:
                stated = re.search(r"^# transformer layers per pipeline stage: ([\d ]+)$", script.text, re.M)
                want = [int(x) for x in stated.group(1).split()] if stated else []
            if want and len(want) == len(stages) and len(stages) != pp:
                # The plan lists each virtual stage's layers (pp x vp entries).
                built = [st.count("t") for st in stages]
            if want and built != want:
                P.add(f"megatron: the layout builds pipeline stages of {built} layers, the plan has {want}")
            # validate_layer_layout: as many m as --mtp-num-layers, after every
            # decoder layer, all in one stage, the last chunk of its rank.
            mtp = geti("mtp_num_layers") or 0
            if flat.count("m") != mtp:
                P.add(f"megatron: the layout has {flat.count('m')} MTP layers m, --mtp-num-layers is {mtp} "
                      "(validate_layer_layout)", ln("pipeline_model_parallel_layout"))
            elif mtp:
                holding = [i for i, st in enumerate(stages) if "m" in st]
                if "t" in flat[flat.index("m"):]:
                    P.add("megatron: decoder layers must be placed before MTP layers (validate_layer_layout)")
                if len(holding) != 1 or holding[0] // pp != vpp - 1:
                    P.add("megatron: the MTP layers must all be in one virtual stage, the last of its rank "
                          "(validate_layer_layout)")
            if vpp == 1:
                vpp = None
    if vpp is not None:
        # validate_args: interleaving needs pp > 1 with --overlap-p2p-communication
        # (default on), pp > 2 without it.
        if ns.get("overlap_p2p_comm", True):
            if pp <= 1:
                P.add("megatron: interleaved schedule needs --pipeline-model-parallel-size > 1 (validate_args)")
        elif pp <= 2:
            P.add("megatron: interleaved schedule with --no-overlap-p2p-communication needs pipeline size > 2 "
                  "(validate_args)")
        # pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving:
        # microbatch_group_size_per_vp_stage (default pp, model_parallel_config.py)
        # must lie in [pp, M], and M % group must be 0 or >= pp.
        group = geti("microbatch_group_size_per_vp_stage") or pp
        if microbatches is not None:
            if not pp <= group <= microbatches:
                P.add(f"megatron: interleaved schedule needs {pp} <= microbatch group {group} <= micro-batches "
                      f"{microbatches} (schedules.py forward_backward_pipelining_with_interleaving)")
            elif 0 < microbatches % group < pp:
                P.add(f"megatron: interleaved schedule: micro-batches {microbatches} % group {group} is "
                      f"{microbatches % group}, must be 0 or >= pp {pp} (schedules.py)")
        if plan["vp"] != vpp:
            P.add(f"megatron: virtual pipeline degree {vpp}, the plan has vp={plan['vp']}")
    elif plan["vp"] > 1:
        P.add(f"megatron: the plan has vp={plan['vp']} but no virtual pipeline arguments are given")

    # arguments.py validate_args: "disable sequence parallelism when tp=1"
    # (Megatron turns --sequence-parallel off with a warning).
    if ns.get("sequence_parallel") and tp == 1:
        P.add("megatron: --sequence-parallel with tensor-model-parallel size 1 has no effect (validate_args turns "
              "it off)", ln("sequence_parallel"))
    if ns.get("tp_comm_overlap") and not (ns.get("sequence_parallel") and tp > 1):
        P.add("megatron: --tp-comm-overlap needs --sequence-parallel (validate_args)", ln("tp_comm_overlap"))

    fsdp = bool(ns.get("use_megatron_fsdp"))
    torch_fsdp2 = bool(ns.get("use_torch_fsdp2"))
    # validate_args: --overlap-param-gather only with the distributed optimizer,
    # Megatron-FSDP or dist_muon, and only together with --overlap-grad-reduce.
    if ns.get("overlap_param_gather"):
        if not (ns.get("use_distributed_optimizer") or fsdp or ns.get("optimizer") == "dist_muon"):
            P.add("megatron: --overlap-param-gather needs --use-distributed-optimizer, --use-megatron-fsdp or "
                  "--optimizer dist_muon (validate_args)", ln("overlap_param_gather"))
        if not ns.get("overlap_grad_reduce"):
            P.add("megatron: --overlap-param-gather needs --overlap-grad-reduce (validate_args)",
                  ln("overlap_param_gather"))
    if ns.get("overlap_param_gather_with_optimizer_step"):
        # validate_args: needs the distributed optimizer, --overlap-param-gather and interleaving.
        if not (ns.get("use_distributed_optimizer") and ns.get("overlap_param_gather") and vpp):
            P.add("megatron: --overlap-param-gather-with-optimizer-step needs --use-distributed-optimizer, "
                  "--overlap-param-gather and an interleaved schedule (validate_args)")

    # validate_args: CUDA_DEVICE_MAX_CONNECTIONS.  With tp > 1 or cp > 1 before
    # Blackwell (arch < 10) and neither FSDP, it must be exactly "1"; Torch-FSDP2
    # and Megatron-FSDP assert it is not "1".
    env = cuda_max_connections(script)
    arch, gpu = gpu_arch_major(plan["cluster"])
    if (tp > 1 or cp > 1) and arch < 10 and not (fsdp or torch_fsdp2) and not ns.get("overlap_moe_expert_parallel_comm"):
        if env != "1":
            state = "not set by the script" if env == "inherited" else ("unset" if env is None else f"={env}")
            P.add(f"megatron: tp={tp} cp={cp} on {gpu} needs CUDA_DEVICE_MAX_CONNECTIONS=1, it is {state} "
                  "(validate_args)")
    if (fsdp or torch_fsdp2) and env == "1":
        P.add("megatron: Megatron-FSDP/Torch-FSDP2 asserts CUDA_DEVICE_MAX_CONNECTIONS != 1, the script exports 1 "
              "(validate_args)")

    # validate_args, Megatron-FSDP block.
    if fsdp:
        if ns.get("ckpt_format") != "fsdp_dtensor":
            P.add(f"megatron: Megatron-FSDP requires --ckpt-format fsdp_dtensor, got {ns.get('ckpt_format')} "
                  "(validate_args)", ln("ckpt_format"))
        if ns.get("optimizer") not in ("sgd", "adam"):
            P.add(f"megatron: Megatron-FSDP supports --optimizer sgd|adam, got {ns.get('optimizer')} (validate_args)")
        if ns.get("megatron_fsdp_version") == 2 and ns.get("use_distributed_optimizer"):
            P.add("megatron: --megatron-fsdp-version 2 is not compatible with --use-distributed-optimizer "
                  "(validate_args)", ln("use_distributed_optimizer"))
        if ns.get("hybrid_context_parallel"):
            P.add("megatron: hybrid context parallelism is not supported with Megatron-FSDP (validate_args)")
        want = {2: "optim_grads", 3: "optim_grads_params"}.get(plan["zero"])
        if want and ns.get("data_parallel_sharding_strategy") != want:
            P.add(f"megatron: plan zero={plan['zero']} is --data-parallel-sharding-strategy {want}, got "
                  f"{ns.get('data_parallel_sharding_strategy')}", ln("data_parallel_sharding_strategy"))
    elif ns.get("ckpt_format") == "fsdp_dtensor":
        P.add("megatron: --ckpt-format fsdp_dtensor needs --use-megatron-fsdp (validate_args)", ln("ckpt_format"))
    if ns.get("ckpt_format") == "torch_dcp" and not torch_fsdp2:
        P.add("megatron: --ckpt-format torch_dcp needs --use-torch-fsdp2 (validate_args)", ln("ckpt_format"))
    if torch_fsdp2:
        # validate_args, --use-torch-fsdp2 block.
        if pp != 1 or ns.get("use_distributed_optimizer") or ns.get("gradient_accumulation_fusion", True) \
                or ns.get("ckpt_format") not in ("torch_dist", "torch_dcp") \
                or not ns.get("untie_embeddings_and_output_weights") or ns.get("fp16"):
            P.add("megatron: --use-torch-fsdp2 needs pp=1, no distributed optimizer, --no-gradient-accumulation-"
                  "fusion, --ckpt-format torch_dist|torch_dcp, untied embeddings and no fp16 (validate_args)")

    # parallel_state.py initialize_model_parallel: (dp * cp) divisible by
    # --num-distributed-optimizer-instances.
    inst = geti("num_distributed_optimizer_instances", 1)
    if inst and (dp * cp) % inst:
        P.add(f"megatron: data-parallel x context-parallel {dp * cp} not divisible by "
              f"--num-distributed-optimizer-instances {inst} (parallel_state.py initialize_model_parallel)",
              ln("num_distributed_optimizer_instances"))
    if inst and inst > 1 and not ns.get("use_distributed_optimizer"):
        P.add("megatron: --num-distributed-optimizer-instances > 1 without --use-distributed-optimizer has no effect",
              ln("num_distributed_optimizer_instances"))

    # Attention heads: transformer_config.py __post_init__ (heads % tp;
    # query groups a multiple or divisor of tp) and attention.py Attention.__init__
    # (divide() of heads by query groups / tp); arguments.py (hidden % heads for
    # kv_channels).  argument_utils.py core_transformer_config_from_args passes
    # --num-query-groups only with --group-query-attention.
    groups = geti("num_query_groups") if ns.get("group_query_attention") else heads
    if "num_query_groups" in given and not ns.get("group_query_attention"):
        P.add("megatron: --num-query-groups is ignored without --group-query-attention "
              "(argument_utils.py core_transformer_config_from_args)", ln("num_query_groups"))
    if heads:
        if heads % tp:
            P.add(f"megatron: --num-attention-heads {heads} not divisible by tp {tp} (transformer_config.py)",
                  ln("num_attention_heads"))
        if groups:
            if groups % tp and tp % groups:
                P.add(f"megatron: --num-query-groups {groups} must be a multiple or divisor of tp {tp} "
                      "(transformer_config.py)", ln("num_query_groups"))
            if heads % groups:
                P.add(f"megatron: --num-attention-heads {heads} not divisible by --num-query-groups {groups} "
                      "(attention.py Attention.__init__)", ln("num_query_groups"))
        if hidden and ns.get("kv_channels") is None and hidden % heads:
            P.add(f"megatron: --hidden-size {hidden} not divisible by --num-attention-heads {heads} "
                  "(validate_args kv_channels)", ln("hidden_size"))

    # transformer_config.py __post_init__ recompute checks and validate_args.
    gran = ns.get("recompute_granularity")
    if gran == "full":
        if ns.get("recompute_method") is None:
            P.add("megatron: --recompute-granularity full needs --recompute-method uniform|block (transformer_config.py)",
                  ln("recompute_granularity"))
        if ns.get("recompute_num_layers") is None:
            P.add("megatron: --recompute-granularity full needs --recompute-num-layers (transformer_config.py)",
                  ln("recompute_granularity"))
    elif gran == "selective":
        if ns.get("recompute_method") is not None:
            P.add("megatron: --recompute-method is not supported with selective recompute (validate_args)",
                  ln("recompute_method"))
        if ns.get("recompute_num_layers") is not None:
            P.add("megatron: --recompute-num-layers must be unset with selective recompute (transformer_config.py)",
                  ln("recompute_num_layers"))
    if ns.get("distribute_saved_activations") and not (tp > 1 and gran == "full"):
        P.add("megatron: --distribute-saved-activations needs tp > 1 and full recompute (validate_args)")
    plan_rec = {"none": None, "selective": "selective", "full": "full"}.get(plan["recompute"], plan["recompute"])
    if gran != plan_rec:
        P.add(f"megatron: --recompute-granularity {gran}, the plan has recompute={plan['recompute']}")
    # transformer_block.py _checkpointed_forward: "uniform" checkpoints groups of recompute_num_layers (every
    # layer recomputed), "block" the first recompute_num_layers of each model chunk only (the plan's
    # recompute_layers); the simulated plan must be the one exported.
    if gran == "full":
        want = plan.get("recompute_layers", 0)
        method, nl = ns.get("recompute_method"), ns.get("recompute_num_layers")
        if want and (method != "block" or nl != want):
            P.add(f"megatron: the plan recomputes the first {want} layers of each chunk, the script has "
                  f"--recompute-method {method} --recompute-num-layers {nl} (want block {want})")
        if not want and method == "block":
            P.add(f"megatron: --recompute-method block recomputes only {nl} layers per chunk; the plan recomputes "
                  "every layer")

    # validate_args: optimizer CPU offload needs the precision-aware optimizer.
    if ns.get("optimizer_cpu_offload") and not ns.get("use_precision_aware_optimizer"):
        P.add("megatron: --optimizer-cpu-offload needs --use-precision-aware-optimizer (validate_args)",
              ln("optimizer_cpu_offload"))
    # megatron/core/optimizer/optimizer_config.py __post_init__: the moment dtypes other than fp32
    # need the precision-aware optimizer, which only Adam supports; megatron/core/optimizer/__init__.py:
    # "--use-precision-aware-optimizer only supported with distributed optimizer" (outside Megatron-FSDP).
    for dest in ("exp_avg_dtype", "exp_avg_sq_dtype"):
        if ns.get(dest, "fp32") != "fp32" and not ns.get("use_precision_aware_optimizer"):
            P.add(f"megatron: --{dest.replace('_', '-')} {ns.get(dest)} needs --use-precision-aware-optimizer "
                  "(OptimizerConfig asserts fp32 without it)", ln(dest))
    if ns.get("use_precision_aware_optimizer"):
        if ns.get("optimizer", "adam") != "adam":
            P.add("megatron: --use-precision-aware-optimizer is only supported with adam (OptimizerConfig)",
                  ln("use_precision_aware_optimizer"))
        if not (ns.get("use_distributed_optimizer") or fsdp):
            P.add("megatron: --use-precision-aware-optimizer needs --use-distributed-optimizer "
                  "(megatron/core/optimizer get_megatron_optimizer)", ln("use_precision_aware_optimizer"))
    moments = "bf16" if ns.get("exp_avg_dtype") == "bf16" and ns.get("exp_avg_sq_dtype") == "bf16" else (
        "fp32" if ns.get("exp_avg_dtype", "fp32") == "fp32" and ns.get("exp_avg_sq_dtype", "fp32") == "fp32" else "mixed")
    if moments != plan.get("moment_dtype", "fp32"):
        P.add(f"megatron: Adam moments {moments} (--exp-avg-dtype/--exp-avg-sq-dtype), the plan has "
              f"{plan.get('moment_dtype', 'fp32')}")
    # validate_args: fp16 and bf16 are exclusive; --grad-reduce-in-bf16 only acts under --bf16.
    if ns.get("fp16") and ns.get("bf16"):
        P.add("megatron: --fp16 and --bf16 together (validate_args asserts not both)")
    if ns.get("grad_reduce_in_bf16") and not ns.get("bf16"):
        P.add("megatron: --grad-reduce-in-bf16 only takes effect with --bf16 (validate_args)", ln("grad_reduce_in_bf16"))
    # validate_args: sequence length and positions.
    seq = geti("seq_length")
    if seq and cp > 1 and seq % (2 * cp):
        P.add(f"megatron: --seq-length {seq} must be a multiple of 2*cp = {2 * cp} (validate_args)", ln("seq_length"))
    mpe = geti("max_position_embeddings")
    if seq and mpe is not None and mpe < seq:
        P.add(f"megatron: --max-position-embeddings {mpe} < --seq-length {seq} (validate_args)",
              ln("max_position_embeddings"))
    for req in ("num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings"):
        if ns.get(req) is None:
            P.add(f"megatron: --{req.replace('_', '-')} is required (validate_args required_args)")
    lr, min_lr = ns.get("lr"), ns.get("min_lr")
    if known(lr) and known(min_lr) and min_lr > lr:
        P.add(f"megatron: --min-lr {min_lr} > --lr {lr} (validate_args)", ln("min_lr"))
    # validate_args "Data blend checks": a single data source.
    sources = int(bool(ns.get("mock_data"))) + int(bool(ns.get("data_path"))) + \
        int(any(ns.get(k) for k in ("train_data_path", "valid_data_path", "test_data_path")))
    if sources > 1:
        P.add("megatron: more than one data source (--mock-data, --data-path, --*-data-path) (validate_args)")
    if ns.get("tokenizer_type") == "NullTokenizer" and ns.get("vocab_size") is None:
        P.add("megatron: NullTokenizer needs --vocab-size (tokenizer build)", ln("tokenizer_type"))
    # validate_args: --attention-backend local only with --spec local.
    if ns.get("attention_backend") == "local" and not (ns.get("spec") and ns.get("spec")[0] == "local"):
        P.add("megatron: --attention-backend local needs --spec local (validate_args)", ln("attention_backend"))

    # validate_args: "Transformer Engine cross entropy loss fusion is disabled due to stability issues".
    if ns.get("cross_entropy_loss_fusion") and ns.get("cross_entropy_fusion_impl") == "te":
        P.add("megatron: --cross-entropy-loss-fusion with --cross-entropy-fusion-impl te (validate_args: disabled "
              "due to stability issues)", ln("cross_entropy_fusion_impl"))

    # Plan consistency: the exported arguments are the plan's.
    megatron_switch_is_plans(ns, plan, "cross_entropy_loss_fusion", "cross_entropy_fusion", ln, P)
    for dest, want in (("tensor_model_parallel_size", plan["tp"]), ("pipeline_model_parallel_size", plan["pp"]),
                       ("context_parallel_size", plan["cp"]), ("micro_batch_size", plan["mbs"]),
                       ("global_batch_size", plan["gbs"]), ("seq_length", plan["seq"] or None)):
        got = ns.get(dest)
        if want is not None and known(got) and got != want:
            P.add(f"megatron: --{dest.replace('_', '-')} {got}, the plan has {want}", ln(dest))
    if dp != plan["dp"]:
        P.add(f"megatron: data-parallel size {dp} (world {world} / tp*pp*cp), the plan has dp={plan['dp']}")
    # Context parallelism's exchange: arguments.py --cp-comm-type (nargs '+', one per layer or one for all);
    # Transformer Engine context_parallel.py attn_forward_func_with_cp takes p2p, all_gather, a2a and a2a+p2p,
    # and AttnFuncWithCPAndQKVOA2A asserts "The number of attention heads needs to be divisible by CP size!"
    # for the query and the key/value heads of a TP rank.
    comm = ns.get("cp_comm_type") or ["p2p"]
    comm = comm if isinstance(comm, list) else [comm]
    for c in comm:
        if c not in ("p2p", "all_gather", "a2a", "a2a+p2p"):
            P.add(f"megatron: --cp-comm-type {c!r} is not one Transformer Engine runs (p2p, all_gather, a2a, a2a+p2p)",
                  ln("cp_comm_type"))
    if cp > 1 and "a2a" in comm and heads:
        groups = geti("num_query_groups", heads) if ns.get("group_query_attention") else heads
        if (heads // max(tp, 1)) % cp or (groups // max(tp, 1)) % cp:
            P.add(f"megatron: --cp-comm-type a2a with cp {cp}: the {heads // max(tp, 1)} query and "
                  f"{groups // max(tp, 1)} key/value heads of a TP rank must be divisible by it (Transformer Engine: "
                  "\"The number of attention heads needs to be divisible by CP size!\")", ln("cp_comm_type"))
    want_comm = "a2a" if plan.get("cp_comm_type") == "a2a" and plan["cp"] > 1 else "p2p"
    if cp > 1 and comm != [want_comm]:
        P.add(f"megatron: --cp-comm-type {' '.join(comm)}, the plan's context-parallel exchange is {want_comm}",
              ln("cp_comm_type"))
    if plan["sp"] and plan["tp"] > 1 and not ns.get("sequence_parallel"):
        P.add("megatron: the plan has sp=on with tp > 1 but --sequence-parallel is missing")
    zero = plan["zero"]
    if zero >= 1 and not (ns.get("use_distributed_optimizer") or fsdp):
        P.add(f"megatron: plan zero={zero} shards optimizer state, which needs --use-distributed-optimizer")
    if zero == 0 and (ns.get("use_distributed_optimizer") or fsdp):
        P.add("megatron: plan zero=0 but the optimizer state is sharded (--use-distributed-optimizer/--use-megatron-fsdp)")
    if zero >= 2 and not fsdp:
        P.add(f"megatron: plan zero={zero} shards gradients, which needs --use-megatron-fsdp")
    prec = "bf16" if ns.get("bf16") else "fp16" if ns.get("fp16") else "fp32"
    # FP8 (Transformer Engine): --fp8-format switches it on (dest "fp8");
    # the recipe is --fp8-recipe (default delayed), its choices the
    # argparse table's.  FP8 training keeps --bf16 for everything else.
    if ns.get("fp8") is not None:
        if prec != "bf16":
            P.add(f"megatron: --fp8-format with {prec}: trainplan's fp8 plans are bf16 with FP8 linears")
        prec = "fp8"
        recipe = ns.get("fp8_recipe")
        if plan.get("fp8_recipe") and recipe != plan["fp8_recipe"]:
            P.add(f"megatron: --fp8-recipe {recipe}, the plan has {plan['fp8_recipe']}")
    if prec != plan["precision"]:
        P.add(f"megatron: precision {prec}, the plan has {plan['precision']}")
    if plan["offload"] == "optimizer" and not ns.get("optimizer_cpu_offload"):
        P.add("megatron: the plan offloads the optimizer but --optimizer-cpu-offload is missing")
    megatron_moe_rules(ns, given, plan, world, tp, pp, cp, layers, P)
    if ns.get("moe_token_dispatcher_type") == "flex" and ns.get("moe_flex_dispatcher_backend") == "hybridep":
        etp = ns.get("expert_tensor_parallel_size")
        hybridep_env_rules(script, plan, int(ns.get("expert_model_parallel_size") or 1),
                           int(tp if etp is None else etp), P)
    # transformer_config.py TransformerConfig.__post_init__, under
    # overlap_moe_expert_parallel_comm.
    if ns.get("overlap_moe_expert_parallel_comm"):
        where = ln("overlap_moe_expert_parallel_comm")
        if (geti("expert_model_parallel_size") or 1) <= 1:
            P.add("megatron: --overlap-moe-expert-parallel-comm is only supported with expert model parallelism "
                  "(transformer_config.py)", where)
        if pp > 1 and vpp is None:
            P.add("megatron: --overlap-moe-expert-parallel-comm with pipeline size > 1 needs a virtual pipeline "
                  "size (transformer_config.py)", where)
        if (ns.get("moe_token_dispatcher_type") or "allgather") not in ("alltoall", "flex"):
            P.add("megatron: --overlap-moe-expert-parallel-comm needs the alltoall or flex token dispatcher "
                  "(transformer_config.py)", where)
        if ns.get("recompute_granularity") == "full" or ns.get("recompute_method") is not None:
            P.add("megatron: --overlap-moe-expert-parallel-comm needs full recomputation off and no "
                  "--recompute-method (transformer_config.py)", where)
        if "moe" in (ns.get("recompute_modules") or []) and ns.get("recompute_granularity") == "selective":
            P.add("megatron: --overlap-moe-expert-parallel-comm cannot recompute the moe module "
                  "(transformer_config.py)", where)
        if not (ns.get("bf16") or ns.get("fp16")):
            P.add("megatron: --overlap-moe-expert-parallel-comm is only supported with a bf16 or fp16 model "
                  "(transformer_config.py)", where)
        if ns.get("moe_shared_expert_overlap"):
            P.add("megatron: --overlap-moe-expert-parallel-comm excludes --moe-shared-expert-overlap "
                  "(transformer_config.py)", where)
    # transformer_config.py: "overlap_moe_expert_parallel_comm must be enabled when enabling
    # delay_wgrad_compute".
    if ns.get("delay_wgrad_compute") and not ns.get("overlap_moe_expert_parallel_comm"):
        P.add("megatron: --delay-wgrad-compute needs --overlap-moe-expert-parallel-comm (transformer_config.py)",
              ln("delay_wgrad_compute"))
    megatron_switch_is_plans(ns, plan, "delay_wgrad_compute", "delay_wgrad", ln, P)
    # Multi-token prediction: arguments.py validate_args ("MTP is not supported with {type} position
    # embedding type. The supported position embedding types are rope and none"); transformer_config.py
    # ("MTP supports at most one layer when enabling overlap_moe_expert_parallel_comm"); the plan's depth.
    mtp = geti("mtp_num_layers") or 0
    if mtp:
        where = ln("mtp_num_layers")
        if (ns.get("position_embedding_type") or "learned_absolute") not in ("rope", "none"):
            P.add("megatron: --mtp-num-layers needs --position-embedding-type rope or none (arguments.py)", where)
        if ns.get("overlap_moe_expert_parallel_comm") and mtp > 1:
            P.add("megatron: --overlap-moe-expert-parallel-comm supports at most one MTP layer "
                  "(transformer_config.py)", where)
    if mtp != plan.get("mtp_layers", 0):
        P.add(f"megatron: --mtp-num-layers {mtp}, the plan has mtp_layers {plan.get('mtp_layers', 0)}")
    megatron_switch_is_plans(ns, plan, "overlap_moe_expert_parallel_comm", "ep_overlap", ln, P)
    megatron_cuda_graph_rules(ns, plan, ln, P)


def megatron_cuda_graph_rules(ns: dict, plan: dict, ln, P) -> None:
    """Per-layer CUDA graphs (Megatron-LM d98e8a64dd): arguments.py --cuda-graph-modules (an empty list
    captures the whole layer) and validate_args (TE's RNG tracker), transformer_config.py __post_init__ for
    cuda_graph_impl transformer_engine; and the plan's modules."""
    impl = ns.get("cuda_graph_impl") or "none"
    mods = list(ns.get("cuda_graph_modules") or [])
    want = plan.get("cuda_graph") or []
    if impl == "none":
        if want:
            P.add(f"megatron: the plan captures CUDA graphs ({want}) but --cuda-graph-impl is none")
        if mods:
            P.add("megatron: --cuda-graph-modules without --cuda-graph-impl has no effect")
        return
    where = ln("cuda_graph_impl")
    if impl != "transformer_engine":
        P.add(f"megatron: --cuda-graph-impl {impl}: trainplan plans Transformer Engine's per-layer graphs", where)
    got = ["layer"] if not mods else mods
    if sorted(got) != sorted(want):
        P.add(f"megatron: CUDA graph modules {got}, the plan has {want}", where)
    experts = int(ns.get("num_experts") or 0)
    if "moe" in mods and "moe_router" in mods:
        P.add("megatron: cuda_graph_modules must not contain both moe and moe_router (transformer_config.py)", where)
    if "moe_preprocess" in mods and "moe_router" not in mods:
        P.add("megatron: moe_preprocess cuda graph is only supported with moe_router cuda graph "
              "(transformer_config.py)", where)
    if experts <= 1 and ("moe" in mods or "moe_router" in mods):
        P.add("megatron: moe cuda graph is only supported for MoE (transformer_config.py)", where)
    freq = ns.get("moe_layer_freq")
    every_moe = experts > 1 and (freq in (None, 1, "1") or (isinstance(freq, str) and "0" not in freq))
    if every_moe and "mlp" in mods:
        P.add("megatron: mlp cuda graph is only supported for dense layers, but not found in the model "
              "(transformer_config.py)", where)
    cf = ns.get("moe_expert_capacity_factor")
    padded = cf is not None and bool(ns.get("moe_pad_expert_input_to_capacity"))
    if experts > 1 and not padded:
        if "moe" in mods:
            P.add("megatron: moe cuda graph is only supported with drop-padding MoE (transformer_config.py)", where)
        if not mods:
            P.add("megatron: a whole-layer graph of a dropless MoE layer captures its host synchronization "
                  "(transformer_config.py allows moe graphs only with drop-padding MoE)", where)
        if (ns.get("moe_token_dispatcher_type") or "allgather") == "alltoall" and \
                (cf is not None or ns.get("moe_router_padding_for_fp8")) and "moe_preprocess" in mods:
            P.add("megatron: moe_preprocess cuda graph is not supported when there are DtoH copies and "
                  "synchronizations in the preprocess step (transformer_config.py)", where)
    gran = ns.get("recompute_granularity")
    rc = ns.get("recompute_modules") or ["core_attn"]
    if gran == "full":
        P.add("megatron: full recompute is only supported with full iteration CUDA graph (transformer_config.py)",
              where)
    if gran == "selective":
        if "moe" in rc and "moe_router" in mods:
            P.add("megatron: moe recompute is not supported with moe_router CUDA graph (transformer_config.py)",
                  where)
        full = not mods
        attn_dropout = float(ns.get("attention_dropout") if ns.get("attention_dropout") is not None else 0.1)
        hidden_dropout = float(ns.get("hidden_dropout") if ns.get("hidden_dropout") is not None else 0.1)
        if attn_dropout != 0.0 and (full or "attn" in mods) and "core_attn" in rc:
            P.add("megatron: attention dropout is not supported with graphed attention recomputation "
                  "(transformer_config.py)", where)
        if hidden_dropout != 0.0 and (((full or "mlp" in mods) and "mlp" in rc) or ((full or "moe" in mods) and "moe" in rc)):
            P.add("megatron: hidden dropout is not supported with graphed MLP/MoE recomputation "
                  "(transformer_config.py)", where)
    if ns.get("cpu_offloading"):
        P.add("megatron: CUDA graphs not supported with CPU offloading (transformer_config.py)", where)
    if ns.get("overlap_moe_expert_parallel_comm") and ("moe" in mods or "mlp" in mods):
        P.add("megatron: CUDA graph scope on moe and mlp is not supported with overlap_moe_expert_parallel_comm "
              "(transformer_config.py)", where)
    if not ns.get("te_rng_tracker"):
        P.add("megatron: CUDA graphs need --te-rng-tracker (arguments.py validate_args switches it on with a "
              "warning)", where)


def megatron_moe_rules(ns: dict, given: dict, plan: dict, world: int, tp: int, pp: int, cp: int, layers, P) -> None:
    """Mixture-of-Experts and latent-attention rules (Megatron-LM d98e8a64dd: arguments.py validate_args,
    megatron/core/transformer/transformer_config.py __post_init__, parallel_state.initialize_model_parallel,
    moe/moe_layer.py)."""
    def ln(dest):
        return given.get(dest, (None,))[0]

    experts = ns.get("num_experts")
    ep = ns.get("expert_model_parallel_size") or 1
    etp = ns.get("expert_tensor_parallel_size")
    etp = tp if etp is None else etp  # arguments.py: defaults to --tensor-model-parallel-size
    if experts is None:
        if ep > 1:
            P.add("megatron: --expert-model-parallel-size > 1 needs --num-experts (validate_args)",
                  ln("expert_model_parallel_size"))
        for dest in ("moe_router_topk", "moe_grouped_gemm", "moe_ffn_hidden_size"):
            if dest in given:
                P.add(f"megatron: --{dest.replace('_', '-')} without --num-experts has no effect", ln(dest))
    else:
        if experts % ep:
            P.add(f"megatron: --num-experts {experts} not divisible by --expert-model-parallel-size {ep} "
                  "(validate_args)", ln("num_experts"))
        # parallel_state.initialize_model_parallel: the expert grid etp x ep x edp x pp covers the world.
        if world % (etp * ep * pp):
            P.add(f"megatron: world size {world} not divisible by etp*ep*pp = {etp * ep * pp} "
                  "(parallel_state.initialize_model_parallel)")
        topk = ns.get("moe_router_topk") or 2
        if topk > experts:
            P.add(f"megatron: --moe-router-topk {topk} exceeds --num-experts {experts}", ln("moe_router_topk"))
        # moe_layer.py MoELayer.forward: "During training, performance may degrade if MoE and tensor
        # parallelism are enabled without also enabling sequence parallelism" -> ValueError.
        if tp > 1 and not ns.get("sequence_parallel"):
            P.add("megatron: MoE with tensor parallelism needs --sequence-parallel (moe_layer.py raises in training)")
        if ns.get("moe_router_enable_expert_bias") and ns.get("moe_router_score_function") not in ("sigmoid",
                                                                                                   "sqrtsoftplus"):
            P.add("megatron: --moe-router-enable-expert-bias needs score function sigmoid or sqrtsoftplus "
                  "(transformer_config.py)", ln("moe_router_enable_expert_bias"))
        if ns.get("add_bias_linear", True) and not ns.get("disable_bias_linear") and etp != 1:
            P.add("megatron: MoE experts with biases need --expert-tensor-parallel-size 1 (transformer_config.py)")
        # The simulator costs the token permutations as Transformer Engine's fused kernels
        # (layer_cost.cc permute, local_sort, unpermute); unfused, Megatron-Core runs torch index ops
        # and syncs the host before the sort by local expert (token_dispatcher.py).
        if not ns.get("moe_permute_fusion"):
            P.add("megatron: an MoE export without --moe-permute-fusion permutes tokens unfused, the plan "
                  "simulated Transformer Engine's fused permutation kernels")
        disp = ns.get("moe_token_dispatcher_type") or "allgather"
        if disp == "flex" and etp * ep <= 1:
            P.add("megatron: the flex dispatcher needs etp*ep > 1 (token_dispatcher.py)")
        # The dispatcher the plan simulated (plan.json moe_dispatcher): flex on its backend, else alltoall
        # where tokens cross GPUs.
        want = plan.get("moe_dispatcher", "alltoall")
        backend = ns.get("moe_flex_dispatcher_backend") or "deepep"
        got = backend if disp == "flex" else "alltoall"
        if etp * ep > 1 and got != want:
            P.add(f"megatron: the export dispatches with {disp}" + (f"/{backend}" if disp == "flex" else "") +
                  f", the plan simulated moe_dispatcher {want}", ln("moe_token_dispatcher_type"))
        # TransformerConfig: "moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity";
        # "Flex token dispatcher with deepep backend does not support moe_pad_expert_input_to_capacity".
        pad = bool(ns.get("moe_pad_expert_input_to_capacity"))
        if pad and ns.get("moe_expert_capacity_factor") is None:
            P.add("megatron: --moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor "
                  "(transformer_config.py)", ln("moe_pad_expert_input_to_capacity"))
        if pad and disp == "flex" and backend == "deepep":
            P.add("megatron: the flex dispatcher with deepep does not support --moe-pad-expert-input-to-capacity "
                  "(transformer_config.py)", ln("moe_pad_expert_input_to_capacity"))
        shared_overlap = bool(ns.get("moe_shared_expert_overlap"))
        megatron_switch_is_plans(ns, plan, "moe_shared_expert_overlap", "moe_shared_expert_overlap", ln, P)
        # transformer_config.py: "moe_shared_expert_overlap only works with alltoall or flex token dispatcher";
        # "disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm".
        if shared_overlap and (ns.get("moe_token_dispatcher_type") or "allgather") not in ("alltoall", "flex"):
            P.add("megatron: --moe-shared-expert-overlap needs the alltoall or flex dispatcher (transformer_config.py)",
                  ln("moe_shared_expert_overlap"))
        if shared_overlap and ns.get("overlap_moe_expert_parallel_comm"):
            P.add("megatron: --moe-shared-expert-overlap with --overlap-moe-expert-parallel-comm "
                  "(transformer_config.py)", ln("moe_shared_expert_overlap"))
        modules = ns.get("recompute_modules") or []
        if shared_overlap and "shared_experts" in (modules if isinstance(modules, list) else [modules]):
            P.add("megatron: shared_experts recompute cannot work with --moe-shared-expert-overlap "
                  "(transformer_config.py)", ln("moe_shared_expert_overlap"))
        if shared_overlap and ns.get("moe_shared_expert_intermediate_size") is None:
            P.add("megatron: --moe-shared-expert-overlap without --moe-shared-expert-intermediate-size has no effect",
                  ln("moe_shared_expert_overlap"))
        megatron_switch_is_plans(ns, plan, "moe_router_fusion", "moe_router_fusion", ln, P)
        megatron_switch_is_plans(ns, plan, "moe_pad_expert_input_to_capacity", "moe_pad_to_capacity", ln, P)
        # TransformerConfig: "When using group limited routing, moe_router_num_groups must be specified";
        # num_moe_experts divisible by it; group_topk <= num_groups.
        groups, gtopk = ns.get("moe_router_num_groups"), ns.get("moe_router_group_topk")
        if gtopk and not groups:
            P.add("megatron: --moe-router-group-topk needs --moe-router-num-groups (transformer_config.py)",
                  ln("moe_router_group_topk"))
        if groups and gtopk:
            experts = ns.get("num_experts") or 0
            if experts % groups != 0:
                P.add(f"megatron: --num-experts {experts} is not divisible by --moe-router-num-groups {groups} "
                      "(transformer_config.py)", ln("moe_router_num_groups"))
            if gtopk > groups:
                P.add(f"megatron: --moe-router-group-topk {gtopk} exceeds --moe-router-num-groups {groups} "
                      "(transformer_config.py)", ln("moe_router_group_topk"))
        freq = ns.get("moe_layer_freq")
        if isinstance(freq, str):
            text = freq.strip("'\"")
            try:
                pattern = eval(text, {"__builtins__": {}}) if text.startswith(("[", "(")) else None  # noqa: S307
            except Exception:  # noqa: BLE001
                pattern = "bad"
            if pattern == "bad" or (pattern is not None and (not isinstance(pattern, list) or
                                                             any(x not in (0, 1) for x in pattern))):
                P.add(f"megatron: --moe-layer-freq {freq} is not an int or a list of 0/1 (arguments.py moe_freq_type)",
                      ln("moe_layer_freq"))
            elif pattern is not None and layers is not None and len(pattern) != layers:
                P.add(f"megatron: --moe-layer-freq lists {len(pattern)} layers, --num-layers is {layers} "
                      "(transformer_config.py)", ln("moe_layer_freq"))
        cf = ns.get("moe_expert_capacity_factor")
        if cf is not None and ns.get("moe_router_load_balancing_type") not in (
                "aux_loss", "seq_aux_loss", "global_aux_loss", "none", ["aux_loss"], ["seq_aux_loss"],
                ["global_aux_loss"], ["none"]):
            P.add("megatron: --moe-expert-capacity-factor needs aux-loss or no load balancing (transformer_config.py)")
    if ns.get("multi_latent_attention") and ns.get("group_query_attention"):
        P.add("megatron: --multi-latent-attention with --group-query-attention (training.py asserts not both)")
    # Sliding-window attention (arguments.py: --window-size by tuple_type, --window-attn-skip-freq by
    # moe_freq_type; Transformer Engine context_parallel.py: windows under cp only with cp_comm_type a2a or
    # all_gather).
    window = ns.get("window_size")
    if window is not None:
        try:
            parts = tuple(int(x) for x in str(window).strip("'\"()").split(","))
        except ValueError:
            parts = ()
        if len(parts) != 2 or parts[0] < 0 or parts[1] < 0:
            P.add(f"megatron: --window-size {window} is not two non-negative ints 'left,right' (tuple_type)",
                  ln("window_size"))
        comm = ns.get("cp_comm_type") or ["p2p"]
        comm = comm if isinstance(comm, list) else [comm]
        if cp > 1 and any(c not in ("a2a", "all_gather") for c in comm):
            P.add(f"megatron: sliding-window attention with context parallelism needs --cp-comm-type a2a or "
                  f"all_gather, got {comm} (Transformer Engine context_parallel.py)", ln("window_size"))
    skip = ns.get("window_attn_skip_freq")
    if skip is not None:
        if window is None:
            P.add("megatron: --window-attn-skip-freq without --window-size has no effect", ln("window_attn_skip_freq"))
        text = str(skip).strip("'\"")
        if not text.startswith(("[", "(")) and (not text.isdigit() or int(text) < 1):
            P.add(f"megatron: --window-attn-skip-freq {skip} is not a positive int or a list (moe_freq_type)",
                  ln("window_attn_skip_freq"))
    # Plan consistency.
    if plan.get("ep", 1) != ep:
        P.add(f"megatron: --expert-model-parallel-size {ep}, the plan has ep={plan.get('ep', 1)}")
    if experts is not None and plan.get("etp", tp) != etp:
        P.add(f"megatron: expert tensor parallel {etp}, the plan has etp={plan.get('etp')}")
    if plan.get("recompute_modules"):
        mods = ns.get("recompute_modules")
        if sorted(mods or []) != sorted(plan["recompute_modules"]):
            P.add(f"megatron: --recompute-modules {mods}, the plan has {plan['recompute_modules']}")


# ---------------------------------------------------------------------------
# DeepSpeed config


def load_json_no_dups(text: str, P: Problems, what: str, line0: int | None = None):
    dups = []

    def hook(pairs):
        seen = {}
        for k, v in pairs:
            if k in seen:
                dups.append(k)
            seen[k] = v
        return seen

    try:
        cfg = json.loads(text, object_pairs_hook=hook)
    except ValueError as e:
        P.add(f"{what}: not valid JSON: {e}", line0)
        return None
    for k in dups:
        # config.py: hjson.load(..., object_pairs_hook=dict_raise_error_on_duplicate_keys)
        P.add(f"{what}: duplicate key {k!r} (DeepSpeed rejects duplicate keys)", line0)
    return cfg


def type_ok(value, typ: str) -> bool:
    for t in typ.split("|"):
        if t == "null" and value is None:
            return True
        if t == "bool" and isinstance(value, bool):
            return True
        if t == "int" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if t == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if t in ("str", "Path") and isinstance(value, str):
            return True
        if t.startswith("object") and isinstance(value, dict):
            return True
        if t == "list" and isinstance(value, list):
            return True
        if t.startswith("enum:"):
            return True  # checked against choices
        if t == "any":
            return True
    return False


def check_model(obj, model: str, models: dict, path: str, what: str, P: Problems) -> None:
    """A pydantic DeepSpeedConfigModel section: extra='forbid', populate_by_name."""
    spec = models[model]
    fields = spec["fields"]
    by_key = {}
    for name, f in fields.items():
        by_key[name] = (name, f)
        if "alias" in f:
            by_key[f["alias"]] = (name, f)
    if not isinstance(obj, dict):
        P.add(f"{what}: {path} must be an object")
        return
    for key, value in obj.items():
        if key not in by_key:
            if spec.get("extra") == "forbid":
                P.add(f"{what}: {path}.{key} is not a field of {model} (pydantic extra='forbid': DeepSpeed rejects "
                      "the config)")
            continue
        name, f = by_key[key]
        typ = f["type"]
        if value == "auto":
            continue  # DeepSpeedConfigModel.__init__ drops "auto" values (HF integration)
        if not type_ok(value, typ):
            P.add(f"{what}: {path}.{key} = {json.dumps(value)} is not {typ}")
            continue
        if "choices" in f and value is not None and value not in f["choices"]:
            P.add(f"{what}: {path}.{key} = {json.dumps(value)} is not one of {f['choices']}")
        for b, op in (("ge", lambda a, c: a >= c), ("le", lambda a, c: a <= c), ("gt", lambda a, c: a > c),
                      ("lt", lambda a, c: a < c)):
            if b in f and isinstance(value, (int, float)) and not isinstance(value, bool) and not op(value, f[b]):
                P.add(f"{what}: {path}.{key} = {value} violates {b} {f[b]}")
        if f.get("deprecated"):
            P.add(f"{what}: {path}.{key} is deprecated" + (f" (use {f['new_param']})" if f.get("new_param") else ""))
        if typ.startswith("object:") or "|object:" in typ:
            sub = [t for t in typ.split("|") if t.startswith("object:")][0][7:]
            if isinstance(value, dict) and sub in models:
                check_model(value, sub, models, f"{path}.{key}", what, P)


def deepspeed_config_rules(cfg: dict, data: dict, plan: dict, what: str, P: Problems, *, tp: int = 1, pp: int = 1, sp: int = 1,
                           pipeline_engine: bool = False, client_optimizer: bool = False,
                           cpu_optimizer: bool = False, line: int | None = None) -> dict:
    top = data["top_level"]["keys"]
    models = data["models"]
    sections = data["sections"]
    for key, value in cfg.items():
        if key not in top:
            P.add(f"{what}: unknown top-level key {key!r} (DeepSpeed never reads it)", line)
            continue
        typ = top[key]["type"]
        if not type_ok(value, typ):
            P.add(f"{what}: {key} = {json.dumps(value)} is not {typ}", line)
            continue
        choices = top[key].get("choices")
        if choices and isinstance(value, str) and value.lower() not in choices:
            P.add(f"{what}: {key} = {json.dumps(value)} is not one of {choices}", line)
    for sec, spec in sections.items():
        if sec not in cfg or not isinstance(cfg[sec], dict):
            continue
        if "model" in spec:
            check_model(cfg[sec], spec["model"], models, sec, what, P)
            continue
        for k, v in cfg[sec].items():
            f = spec["fields"].get(k)
            if f is None:
                P.add(f"{what}: {sec}.{k} is not read by DeepSpeed ({spec['read_by']})", line)
            elif not type_ok(v, f["type"]):
                P.add(f"{what}: {sec}.{k} = {json.dumps(v)} is not {f['type']}", line)
            elif "choices" in f and v is not None and v not in f["choices"]:
                P.add(f"{what}: {sec}.{k} = {json.dumps(v)} is not one of {f['choices']}", line)

    zero = cfg.get("zero_optimization", {}) if isinstance(cfg.get("zero_optimization"), dict) else {}
    stage = zero.get("stage", 0)
    fp16 = isinstance(cfg.get("fp16"), dict) and cfg["fp16"].get("enabled") is True
    bf16_sec = cfg.get("bf16", cfg.get("bfloat16"))
    bf16 = isinstance(bf16_sec, dict) and bf16_sec.get("enabled") is True
    # config.py _initialize_params: 'bfloat16 and fp16 modes cannot be simultaneously enabled'.
    if fp16 and bf16:
        P.add(f"{what}: fp16 and bf16 both enabled (config.py _initialize_params)", line)

    # Optimizer (config.py get_optimizer_name/params; engine.py _configure_basic_optimizer).
    opt = cfg.get("optimizer")
    if isinstance(opt, dict):
        name = str(opt.get("type", ""))
        spec = sections["optimizer"]
        low = name.lower()
        if low not in spec["deepspeed_optimizers"]:
            P.add(f"{what}: optimizer.type {name!r} is not a DeepSpeed optimizer "
                  f"({', '.join(spec['deepspeed_optimizers'])}); DeepSpeed would look up torch.optim.{name}", line)
        params = opt.get("params", {}) or {}
        if "max_grad_norm" in params:
            P.add(f"{what}: optimizer.params.max_grad_norm raises ValueError; use gradient_clipping "
                  "(engine.py _configure_basic_optimizer)", line)
        allowed = spec["params"].get(low)
        if allowed is not None:
            for k in params:
                if k not in allowed and k != "max_grad_norm":
                    P.add(f"{what}: optimizer.params.{k} is not an argument of DeepSpeed's {low} "
                          "(FusedAdam/DeepSpeedCPUAdam)", line)
        if client_optimizer:
            P.add(f"{what}: an optimizer block while the launcher passes its own optimizer to deepspeed.initialize",
                  line)

    # config.py _batch_assertion: train_batch_size == micro * gas * world_size,
    # world_size = the data-parallel degree = world / (tp * pp), and / sp under
    # Megatron-DeepSpeed's Ulysses (its mpu's data-parallel group excludes
    # the sequence-parallel ranks, parallel_state.py).
    world = plan["gpus"]
    dp = world // (tp * pp * sp) if world % (tp * pp * sp) == 0 else None
    tb = cfg.get("train_batch_size")
    mb = cfg.get("train_micro_batch_size_per_gpu")
    gas = cfg.get("gradient_accumulation_steps")
    if dp is None:
        P.add(f"{what}: world {world} not divisible by tp*pp = {tp * pp}", line)
    elif all(isinstance(x, int) and not isinstance(x, bool) for x in (tb, mb, gas)):
        for k, v in (("train_batch_size", tb), ("train_micro_batch_size_per_gpu", mb),
                     ("gradient_accumulation_steps", gas)):
            if v <= 0:
                P.add(f"{what}: {k} = {v} must be > 0 (config.py _batch_assertion)", line)
        if tb != mb * gas * dp:
            P.add(f"{what}: train_batch_size {tb} != train_micro_batch_size_per_gpu {mb} * gradient_accumulation_steps "
                  f"{gas} * data-parallel {dp} (config.py _batch_assertion)", line)
    elif tb is None and mb is None:
        P.add(f"{what}: neither train_batch_size nor train_micro_batch_size_per_gpu is set (config.py "
              "_set_batch_related_parameters)", line)
    if isinstance(tb, int) and tb != plan["gbs"]:
        P.add(f"{what}: train_batch_size {tb}, the plan has gbs={plan['gbs']}", line)
    if isinstance(mb, int) and mb != plan["mbs"]:
        P.add(f"{what}: train_micro_batch_size_per_gpu {mb}, the plan has mbs={plan['mbs']}", line)

    # pipe/engine.py PipelineEngine.__init__: ZeRO stage < 2.
    if pipeline_engine and isinstance(stage, int) and stage >= 2:
        P.add(f"{what}: zero_optimization.stage {stage} with DeepSpeed's PipelineEngine: \"ZeRO-2 and ZeRO-3 are "
              "incompatible with pipeline parallelism\" (pipe/engine.py)", line)
    # engine.py _do_optimizer_sanity_check: without ZeRO (and without amp) the
    # model dtype must equal data_types.grad_accum_dtype.
    dt = cfg.get("data_types", {}) if isinstance(cfg.get("data_types"), dict) else {}
    gad = dt.get("grad_accum_dtype")
    if gad is not None and stage == 0 and not (isinstance(cfg.get("amp"), dict) and cfg["amp"].get("enabled")):
        model_dtype = "fp16" if fp16 else "bf16" if bf16 else "fp32"
        of = sections["data_types"]["fields"]["grad_accum_dtype"]["dtype_of"]
        acc = next((k for k, v in of.items() if gad in v), None)
        if acc is not None and acc != model_dtype:
            P.add(f"{what}: ZeRO stage 0 with a {model_dtype} model and data_types.grad_accum_dtype {gad!r}: "
                  "NotImplementedError 'unsupported mix of model_dtype and grad_accum_dtype' "
                  "(engine.py _do_optimizer_sanity_check)", line)
    # engine.py _configure_optimizer: ZeRO-Offload with a client optimizer that is
    # not DeepSpeedCPUAdam raises unless zero_force_ds_cpu_optimizer is false.
    off = zero.get("offload_optimizer") if isinstance(zero.get("offload_optimizer"), dict) else None
    if client_optimizer and off and off.get("device") in ("cpu", "nvme") and not cpu_optimizer \
            and cfg.get("zero_force_ds_cpu_optimizer", True):
        P.add(f"{what}: offload_optimizer to {off.get('device')} with the launcher's own optimizer, which is not "
              "DeepSpeedCPUAdam (engine.py _configure_optimizer raises ZeRORuntimeException)", line)
    # config.py _do_error_check.
    if bf16 and isinstance(bf16_sec, dict) and bf16_sec.get("bf16_optimizer_states") \
            and not bf16_sec.get("bf16_master_weights_and_grads"):
        P.add(f"{what}: bf16_optimizer_states needs bf16_master_weights_and_grads (config.py _do_error_check)", line)
    if cfg.get("gradient_allreduce_op") == "sum" and stage == 3:
        P.add(f"{what}: gradient_allreduce_op 'sum' is not supported with ZeRO stage 3 (config.py _do_error_check)",
              line)

    autoep_rules(cfg, sections["expert_parallel"], plan, model_doc(plan["model"]), what, P, tp=tp, pp=pp, line=line)

    # Plan consistency.
    if stage != plan["zero"]:
        P.add(f"{what}: zero_optimization.stage {stage}, the plan has zero={plan['zero']}", line)
    prec = "fp16" if fp16 else "bf16" if bf16 else "fp32"
    if prec != plan["precision"]:
        P.add(f"{what}: precision {prec}, the plan has {plan['precision']}", line)
    if plan["offload"] in ("optimizer", "params") and not off:
        P.add(f"{what}: the plan offloads {plan['offload']} but zero_optimization.offload_optimizer is missing", line)
    if plan["offload"] == "params" and not isinstance(zero.get("offload_param"), dict):
        P.add(f"{what}: the plan offloads parameters but zero_optimization.offload_param is missing", line)
    if plan["precision"] == "bf16" and plan["grad_dtype"] in ("fp32", "bf16") and gad is not None:
        of = sections["data_types"]["fields"]["grad_accum_dtype"]["dtype_of"]
        acc = next((k for k, v in of.items() if gad in v), None)
        if acc != plan["grad_dtype"]:
            P.add(f"{what}: data_types.grad_accum_dtype {gad!r}, the plan has grad_dtype={plan['grad_dtype']}", line)
    return {"stage": stage, "bf16": bf16, "fp16": fp16}


def autoep_rules(cfg: dict, spec: dict, plan: dict, model: dict | None, what: str, P: Problems, *, tp: int, pp: int,
                 line: int | None = None) -> None:
    """DeepSpeed's AutoEP (config "expert_parallel"; tests/data/frameworks/deepspeed_config.json rules autoep_*):
    what deepspeed.initialize validates, and whether it trains the plan's model and expert parallelism."""
    sec = cfg.get("expert_parallel")
    moe = (model or {}).get("moe")
    enabled = isinstance(sec, dict) and sec.get("enabled") is True
    if not enabled:
        if moe and plan["ep"] > 1:
            P.add(f"{what}: the plan has ep={plan['ep']} but expert_parallel is not enabled: DeepSpeed keeps every "
                  "expert on every rank", line)
        return
    if sec.get("load_balance_coeff") is not None:
        P.add(f"{what}: expert_parallel.load_balance_coeff must be null (AutoEP raises: expert-bias balancing is not "
              "supported)", line)
    size = sec.get("autoep_size", 1)
    etp = sec.get("expert_tensor_parallel_size", 1)
    if not (isinstance(size, int) and size >= 1 and isinstance(etp, int) and etp >= 1):
        P.add(f"{what}: expert_parallel.autoep_size {size!r} and expert_tensor_parallel_size {etp!r} must be positive "
              "integers (build_folding_spec)", line)
        return
    world = plan["gpus"]
    if world % pp or (world // pp) % (size * etp):
        P.add(f"{what}: autoep_size * expert_tensor_parallel_size = {size * etp} does not divide the stage size "
              f"world/pp = {world}/{pp} (build_folding_spec)", line)
    if etp != 1:
        P.add(f"{what}: expert_parallel.expert_tensor_parallel_size {etp} is not supported yet (validate_folding_global)",
              line)
    if tp > 1:
        P.add(f"{what}: AutoEP with tensor model parallelism from Megatron-DeepSpeed's mpu (tp={tp}) raises in "
              "engine.py _configure_expert_parallel", line)
    if size != plan["ep"]:
        P.add(f"{what}: expert_parallel.autoep_size {size}, the plan has ep={plan['ep']}", line)
    presets = spec["presets"]
    preset = sec.get("preset_model")
    if preset is not None and preset not in presets:
        P.add(f"{what}: expert_parallel.preset_model {preset!r} is not an AutoEP preset ({', '.join(presets)})", line)
        preset = None
    if model is None:
        return
    if not moe:
        P.add(f"{what}: expert_parallel is enabled but the model has no experts (AutoEP detects no MoE layer)", line)
        return
    experts = int(moe["experts"])
    if size > experts or experts % size:
        P.add(f"{what}: autoep_size {size} does not divide the model's {experts} experts "
              "(validate_autoep_post_detection)", line)
    hf = model.get("hf_model_type")
    if preset is not None:
        pr = presets[preset]
        if hf not in pr["hf_model_types"]:
            P.add(f"{what}: AutoEP preset {preset!r} supports model_type {pr['hf_model_types']}; the model's "
                  f"config.json model_type is {hf!r} (_validate_hf_model_type raises)", line)
        if pr["score_func"] != moe.get("router", "softmax"):
            P.add(f"{what}: AutoEP preset {preset!r} scores experts with {pr['score_func']}; the model's router is "
                  f"{moe.get('router', 'softmax')}", line)
        if int(moe.get("shared_experts", 0) or 0) > 0 and not pr["shared_experts"]:
            P.add(f"{what}: AutoEP preset {preset!r} has no shared experts; the model has {moe['shared_experts']}", line)
    if moe.get("load_balancing") == "aux_free":
        P.add(f"{what}: the model balances its experts without an auxiliary loss (expert bias), which AutoEP does not "
              "run (load_balance_coeff must be null)", line)
    if moe.get("capacity_factor") is not None:
        P.add(f"{what}: the model drops tokens beyond capacity factor {moe['capacity_factor']}; AutoEP routes dropless",
              line)
    zero = cfg.get("zero_optimization") if isinstance(cfg.get("zero_optimization"), dict) else {}
    if zero.get("stage") == 3:
        if zero.get("zero_quantized_gradients"):
            P.add(f"{what}: AutoEP with ZeRO stage 3 does not support zero_quantized_gradients "
                  "(_validate_zero3_moe_compatibility)", line)
        if (cfg.get("mics_shard_size") or 0) > 0 or (zero.get("mics_shard_size") or 0) > 0:
            P.add(f"{what}: AutoEP with ZeRO stage 3 does not support MiCS (_validate_zero3_moe_compatibility)", line)
        if (zero.get("zero_hpz_partition_size") or 1) > 1:
            P.add(f"{what}: AutoEP with ZeRO stage 3 does not support hpZeRO (_validate_zero3_moe_compatibility)", line)


def megatron_deepspeed_rules(ns: dict, given: dict, plan: dict, script: BashScript, ds_data: dict, P: Problems):
    def ln(dest):
        return given.get(dest, (None,))[0]

    def geti(dest, default=None):
        v = ns.get(dest, default)
        return int(v) if known(v) and not isinstance(v, bool) else default

    world = plan["gpus"]
    tp = geti("tensor_model_parallel_size", 1)
    pp = geti("pipeline_model_parallel_size", 1)
    sps = geti("ds_sequence_parallel_size", 1) or 1
    # Megatron-DeepSpeed megatron/arguments.py validate_args: world % tp, then
    # world % (pp * tp * ds_sequence_parallel_size).
    if world % (tp * pp * sps):
        P.add(f"megatron-deepspeed: world {world} not divisible by tp*pp*ds_sp = {tp * pp * sps} (validate_args)")
        return
    dp = world // (tp * pp * sps)
    # DeepSpeed-Ulysses (megatron/core/parallel_state.py initialize_model_parallel: "DeepSpeed's sequence
    # parallel does not work with tensor parallel or pipeline parallel"; megatron/model/transformer.py:
    # num_attention_heads % sequence-parallel size == 0 for DistributedAttention).
    if sps > 1:
        if tp != 1 or pp != 1:
            P.add(f"megatron-deepspeed: --ds-sequence-parallel-size {sps} with tp {tp} pp {pp}: DeepSpeed's sequence "
                  "parallel does not work with tensor parallel or pipeline parallel (parallel_state.py)",
                  ln("ds_sequence_parallel_size"))
        heads_ = geti("num_attention_heads")
        if heads_ and heads_ % sps:
            P.add(f"megatron-deepspeed: --num-attention-heads {heads_} not divisible by --ds-sequence-parallel-size "
                  f"{sps} (transformer.py DistributedAttention)", ln("ds_sequence_parallel_size"))
    if sps > 1 and plan.get("cp_comm_type") != "a2a":
        P.add(f"megatron-deepspeed: --ds-sequence-parallel-size {sps} runs Ulysses all-to-alls; the plan's "
              f"context-parallel exchange is {plan.get('cp_comm_type', 'p2p')}", ln("ds_sequence_parallel_size"))
    if sps != max(1, plan["cp"]) and (sps > 1 or plan["cp"] > 1):
        P.add(f"megatron-deepspeed: --ds-sequence-parallel-size {sps}, the plan has cp={plan['cp']}",
              ln("ds_sequence_parallel_size"))
    # validate_args: --no-pipeline-parallel requires pp == 1.
    no_pipe = bool(ns.get("no_pipeline_parallel"))
    if no_pipe and pp != 1:
        P.add("megatron-deepspeed: --no-pipeline-parallel needs --pipeline-model-parallel-size 1 (validate_args)",
              ln("no_pipeline_parallel"))
    # megatron/microbatches.py ConstantNumMicroBatches: gbs % (mbs * dp).
    mbs, gbs = geti("micro_batch_size"), geti("global_batch_size")
    if mbs is None:
        P.add("megatron-deepspeed: --micro-batch-size missing (validate_args)")
    if mbs and gbs and gbs % (mbs * dp):
        P.add(f"megatron-deepspeed: --global-batch-size {gbs} not divisible by micro batch {mbs} x data-parallel {dp} "
              "(megatron/microbatches.py)", ln("global_batch_size"))
    # validate_args: interleaving needs pp > 2.
    if ns.get("num_layers_per_virtual_pipeline_stage") is not None and pp <= 2:
        P.add("megatron-deepspeed: --num-layers-per-virtual-pipeline-stage needs pipeline size > 2 (validate_args)")
    # validate_args: sequence parallelism is switched off with tp == 1; on CUDA it
    # raises unless CUDA_DEVICE_MAX_CONNECTIONS=1.
    if ns.get("sequence_parallel"):
        if tp == 1:
            P.add("megatron-deepspeed: --sequence-parallel with tp 1 has no effect (validate_args turns it off)",
                  ln("sequence_parallel"))
        elif cuda_max_connections(script) != "1":
            P.add("megatron-deepspeed: --sequence-parallel needs CUDA_DEVICE_MAX_CONNECTIONS=1 (validate_args raises "
                  "RuntimeError)", ln("sequence_parallel"))
    if plan["sp"] and plan["tp"] > 1 and not ns.get("sequence_parallel"):
        P.add("megatron-deepspeed: the plan has sp=on with tp > 1 but --sequence-parallel is missing")
    # validate_args GQA: heads % num_key_value_heads.
    heads, kv = geti("num_attention_heads"), geti("num_key_value_heads")
    if heads and kv and heads % kv:
        P.add(f"megatron-deepspeed: --num-attention-heads {heads} not divisible by --num-key-value-heads {kv} "
              "(validate_args)", ln("num_key_value_heads"))
    if heads and heads % tp:
        P.add(f"megatron-deepspeed: --num-attention-heads {heads} not divisible by tp {tp}", ln("num_attention_heads"))
    hidden = geti("hidden_size")
    if hidden and heads and ns.get("kv_channels") is None and hidden % heads:
        P.add(f"megatron-deepspeed: --hidden-size {hidden} not divisible by heads {heads} (validate_args)")
    # validate_args: selective recompute forbids --recompute-method; fp16/bf16 exclusive.
    if ns.get("recompute_granularity") == "selective" and ns.get("recompute_method") is not None:
        P.add("megatron-deepspeed: --recompute-method with selective recompute (validate_args)", ln("recompute_method"))
    if ns.get("fp16") and ns.get("bf16"):
        P.add("megatron-deepspeed: --fp16 and --bf16 together (validate_args)")
    seq, mpe = geti("seq_length"), geti("max_position_embeddings")
    if seq and mpe is not None and mpe < seq:
        P.add(f"megatron-deepspeed: --max-position-embeddings {mpe} < --seq-length {seq} (validate_args)")
    for req in ("num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings"):
        if ns.get(req) is None:
            P.add(f"megatron-deepspeed: --{req.replace('_', '-')} is required (validate_args)")
    lr, min_lr = ns.get("lr"), ns.get("min_lr")
    if known(lr) and known(min_lr) and min_lr > lr:
        P.add(f"megatron-deepspeed: --min-lr {min_lr} > --lr {lr} (validate_args)")
    if ns.get("use_distributed_optimizer") and ns.get("DDP_impl", "local") != "local":
        P.add("megatron-deepspeed: --use-distributed-optimizer needs --DDP-impl local (validate_args)")

    # The DeepSpeed config: written by a heredoc and named by --deepspeed_config.
    if not ns.get("deepspeed"):
        P.add("megatron-deepspeed: --deepspeed missing: Megatron-DeepSpeed ignores the DeepSpeed config without it")
    cfg_path = ns.get("deepspeed_config")
    doc = None
    for h in script.heredocs:
        if cfg_path is not None and str(h["target"]) == str(cfg_path):
            doc = h
    if cfg_path is None:
        P.add("megatron-deepspeed: --deepspeed_config missing")
    elif doc is None:
        P.add(f"megatron-deepspeed: --deepspeed_config {cfg_path} is not the file the script writes "
              f"({[str(h['target']) for h in script.heredocs]})", ln("deepspeed_config"))
    if doc is not None:
        cfg = load_json_no_dups(doc["body"], P, "deepspeed config (heredoc)", doc["line"])
        if cfg is not None:
            # pretrain_gpt.py: --deepspeed without --no-pipeline-parallel builds
            # GPTModelPipe, so deepspeed.initialize returns a PipelineEngine;
            # megatron/training.py passes its own optimizer (client optimizer).
            r = deepspeed_config_rules(cfg, ds_data, plan, "deepspeed config (heredoc)", P, tp=tp, pp=pp, sp=sps,
                                       pipeline_engine=not no_pipe, client_optimizer=True,
                                       cpu_optimizer=bool(ns.get("cpu_optimizer")) and not ns.get("cpu_torch_adam"),
                                       line=doc["line"])
            # Megatron-DeepSpeed reads --zero-stage itself (zero.Init(enabled=zero_stage==3),
            # language_model.py), so it must match the config's stage.
            zs = ns.get("zero_stage")
            if known(zs) and int(zs) != r["stage"]:
                P.add(f"megatron-deepspeed: --zero-stage {zs} but the DeepSpeed config has stage {r['stage']}",
                      ln("zero_stage"))
            if known(gbs) and cfg.get("train_batch_size") not in (None, gbs):
                P.add(f"megatron-deepspeed: --global-batch-size {gbs} but train_batch_size "
                      f"{cfg.get('train_batch_size')} (megatron/training.py sets the engine's batch from "
                      "--global-batch-size)", ln("global_batch_size"))
            if known(mbs) and cfg.get("train_micro_batch_size_per_gpu") not in (None, mbs):
                P.add(f"megatron-deepspeed: --micro-batch-size {mbs} but train_micro_batch_size_per_gpu "
                      f"{cfg.get('train_micro_batch_size_per_gpu')}", ln("micro_batch_size"))
            if bool(ns.get("bf16")) != r["bf16"] or bool(ns.get("fp16")) != r["fp16"]:
                P.add("megatron-deepspeed: --bf16/--fp16 disagree with the DeepSpeed config's bf16/fp16 sections")
    # Plan consistency.
    for dest, want in (("tensor_model_parallel_size", plan["tp"]), ("pipeline_model_parallel_size", plan["pp"]),
                       ("micro_batch_size", plan["mbs"]), ("global_batch_size", plan["gbs"]),
                       ("seq_length", plan["seq"] or None)):
        got = ns.get(dest)
        if want is not None and known(got) and got != want:
            P.add(f"megatron-deepspeed: --{dest.replace('_', '-')} {got}, the plan has {want}", ln(dest))
    if dp != plan["dp"]:
        P.add(f"megatron-deepspeed: data-parallel size {dp}, the plan has dp={plan['dp']}")


# ---------------------------------------------------------------------------
# FSDP2 / DDP script


class ConstEval:
    """Evaluates module-level constant expressions (ints, strs, bools)."""

    def __init__(self, consts: dict):
        self.c = consts

    def __call__(self, node):
        try:
            return self._ev(node)
        except Exception:
            return None

    def _ev(self, n):
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            if n.id in self.c:
                return self.c[n.id]
            raise KeyError(n.id)
        if isinstance(n, ast.BoolOp):
            # Short-circuit on a known operand: (False and x) is False, (True or x) is True.
            vals, unknown = [], False
            for v in n.values:
                try:
                    vals.append(self._ev(v))
                except Exception:
                    unknown = True
                    continue
                if isinstance(n.op, ast.And) and not vals[-1]:
                    return vals[-1]
                if isinstance(n.op, ast.Or) and vals[-1]:
                    return vals[-1]
            if unknown:
                raise ValueError("unknown operand")
            return vals[-1]
        if isinstance(n, ast.UnaryOp):
            v = self._ev(n.operand)
            return (not v) if isinstance(n.op, ast.Not) else -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp):
            a, b = self._ev(n.left), self._ev(n.right)
            ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                   ast.FloorDiv: lambda: a // b, ast.Mod: lambda: a % b, ast.Div: lambda: a / b}
            return ops[type(n.op)]()
        if isinstance(n, ast.Compare):
            left = self._ev(n.left)
            for op, right in zip(n.ops, n.comparators):
                r = self._ev(right)
                ok = {ast.Eq: left == r, ast.NotEq: left != r, ast.Lt: left < r, ast.LtE: left <= r,
                      ast.Gt: left > r, ast.GtE: left >= r}[type(op)]
                if not ok:
                    return False
                left = r
            return True
        raise ValueError


def version_tuple(v: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:2])


def fsdp_rules(text: str, plan: dict, api: dict, P: Problems, nodes_opt: int | None) -> None:
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        P.add(f"python: SyntaxError: {e.msg}", e.lineno)
        return
    names = api["names"]

    # Module-level constants.
    # Module-level constants, and names assigned exactly once anywhere whose
    # value is a constant expression of those (e.g. DDP_WRAPPED = not FSDP and DP > 1).
    consts: dict[str, object] = {}
    ev = ConstEval(consts)
    assigns: dict[str, list] = {}
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)) else []
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    assigns.setdefault(n.id, []).append(node)
    changed = True
    while changed:
        changed = False
        for name, nodes in assigns.items():
            if name in consts or len(nodes) != 1 or not isinstance(nodes[0], ast.Assign):
                continue
            node = nodes[0]
            if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                v = ev(node.value)
                if v is not None:
                    consts[name] = v
                    changed = True

    # Reachable code: prune branches whose test is a known constant.  Code under
    # an undecidable test that checks a mode (a name only ever assigned True or
    # False, or an isinstance()/hasattr() call) is "guarded": it may be meant for
    # the other wrapper.  A test such as `not last` guards nothing.
    reachable: list[ast.AST] = []
    guarded: set[int] = set()
    mode_flags = {name for name, nodes in assigns.items()
                  if all(isinstance(x, ast.Assign) and isinstance(x.value, ast.Constant)
                         and isinstance(x.value.value, bool) for x in nodes)}

    def is_mode_test(test):
        for x in ast.walk(test):
            if isinstance(x, ast.Name) and x.id in mode_flags:
                return True
            if isinstance(x, ast.Call) and isinstance(x.func, ast.Name) and x.func.id in ("isinstance", "hasattr"):
                return True
        return False

    def visit(n, g=False):
        if isinstance(n, (ast.If, ast.IfExp)):
            t = ev(n.test)
            visit(n.test, g)
            mg = g or (t is None and is_mode_test(n.test))
            body = n.body if isinstance(n.body, list) else [n.body]
            orelse = n.orelse if isinstance(n.orelse, list) else [n.orelse]
            for c in body if t is not False else []:
                visit(c, mg)
            for c in orelse if t is not True else []:
                visit(c, mg)
            return
        reachable.append(n)
        if g:
            guarded.add(id(n))
        for c in ast.iter_child_nodes(n):
            visit(c, g)

    visit(tree)

    # Import aliases (module and function level) -> dotted torch names.
    alias: dict[str, str] = {}
    used: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "torch":
                    continue
                if a.asname:
                    alias[a.asname] = a.name
                else:
                    alias[a.name.split(".")[0]] = a.name.split(".")[0]
                used.setdefault(a.name, node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
            used.setdefault(node.module, node.lineno)
            for a in node.names:
                alias[a.asname or a.name] = f"{node.module}.{a.name}"
                used.setdefault(f"{node.module}.{a.name}", node.lineno)

    def dotted(n):
        parts = []
        while isinstance(n, ast.Attribute):
            parts.append(n.attr)
            n = n.value
        if isinstance(n, ast.Name) and n.id in alias:
            return ".".join([alias[n.id]] + parts[::-1])
        return None

    attr_children = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            attr_children.add(id(node.value))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)) and id(node) not in attr_children:
            d = dotted(node)
            if d:
                used.setdefault(d, node.lineno)
    need = ("0", "0")
    need_name = None
    for name, line in sorted(used.items(), key=lambda kv: kv[1]):
        entry = names.get(name)
        if entry is None:
            P.add(f"python: {name} is not a PyTorch API name (tests/data/frameworks/pytorch_api.json)", line)
            continue
        if version_tuple(entry["since"]) > version_tuple(need[0]):
            need, need_name = (entry["since"], name), name
    m = re.search(r"PyTorch\s*>=\s*(\d+\.\d+)", text)
    if m and need_name and version_tuple(need[0]) > version_tuple(m.group(1)):
        P.add(f"python: the script says PyTorch >= {m.group(1)} but {need_name} needs {need[0]}")

    # Keyword arguments of known callables; **kwargs resolved from a dict literal
    # (and later name["key"] = ... assignments) in the same function.
    def dict_keys_for(func_node, var):
        keys = set()
        for n in ast.walk(func_node):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name) and t.id == var and isinstance(n.value, ast.Dict):
                        keys |= {k.value for k in n.value.keys if isinstance(k, ast.Constant)}
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == var \
                            and isinstance(t.slice, ast.Constant):
                        keys.add(t.slice.value)
        return keys

    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Module))]

    def enclosing(call):
        best = tree
        for f in funcs:
            if f is not tree and any(x is call for x in ast.walk(f)):
                best = f
        return best

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        d = dotted(node.func)
        entry = names.get(d) if d else None
        if not entry or "kwargs" not in entry:
            continue
        allowed = set(entry["kwargs"])
        for kw in node.keywords:
            keys = {kw.arg} if kw.arg else (dict_keys_for(enclosing(node), kw.value.id)
                                            if isinstance(kw.value, ast.Name) else set())
            for k in keys:
                if k not in allowed and not entry.get("extra_kwargs"):
                    P.add(f"python: {d}() has no keyword argument {k!r} (pytorch_api.json)", node.lineno)

    # Plan constants.
    dp, tp, zero = plan["dp"], plan["tp"], plan["zero"]
    accum = plan["gbs"] // (plan["mbs"] * dp) if plan["gbs"] % (plan["mbs"] * dp) == 0 else None
    if plan["pp"] > 1 or plan["cp"] > 1:
        P.add(f"python: the plan has pp={plan['pp']} cp={plan['cp']}, which the FSDP2/DDP script cannot run")
    if plan["gbs"] % (plan["mbs"] * dp):
        P.add(f"python: plan gbs {plan['gbs']} not divisible by mbs {plan['mbs']} x dp {dp}")
    want = {"TP": tp, "DP": dp, "ZERO": zero, "MBS": plan["mbs"], "GBS": plan["gbs"], "ACCUM": accum,
            "SEQ": plan["seq"] or None, "PRECISION": "bf16" if plan["precision"] == "fp8" else plan["precision"],
            "FP8_RECIPE": plan.get("fp8_recipe"), "RECOMPUTE": plan["recompute"],
            "SP": plan["sp"] and tp > 1, "CPU_OFFLOAD": plan["offload"] == "params"}
    # torchao float8 takes the recipes of Float8LinearConfig.from_recipe_name
    # (pytorch_api.json "torchao_float8_recipes"); None is bf16.
    if consts.get("FP8_RECIPE") is not None and consts["FP8_RECIPE"] not in api.get("torchao_float8_recipes", []):
        P.add(f"python: FP8_RECIPE {consts['FP8_RECIPE']!r} is not a torchao float8 recipe")
    if plan.get("fp8_recipe") is None and consts.get("FP8_RECIPE") is not None:
        P.add("python: FP8_RECIPE set but the plan has no fp8")
    for k, v in want.items():
        if v is None:
            continue
        if k not in consts:
            P.add(f"python: constant {k} missing")
        elif consts[k] != v:
            P.add(f"python: {k} = {consts[k]!r}, the plan has {v!r}")
    if "DP" in consts and "TP" in consts and consts["DP"] * consts["TP"] != plan["gpus"]:
        P.add(f"python: DP*TP = {consts['DP'] * consts['TP']} processes, the plan has {plan['gpus']} GPUs")
    if plan["zero"] >= 2 and plan["grad_dtype"] != consts.get("REDUCE_DTYPE", plan["grad_dtype"]):
        P.add(f"python: REDUCE_DTYPE {consts.get('REDUCE_DTYPE')!r}, the plan has grad_dtype={plan['grad_dtype']}")
    hdr = re.search(r"(\d+) GPUs \((\d+) nodes? x (\d+)\)", text)
    if nodes_opt is not None and hdr and int(hdr.group(2)) != nodes_opt:
        P.add(f"python: header says {hdr.group(2)} nodes, the job has {nodes_opt}")

    # Gradient accumulation as trainplan simulates it (simulator/framework/
    # framework.cc, pytorch profile).  DDP: all-reduce once per step, after the
    # last micro-batch, inside the model.no_sync() context manager until then
    # (torch/nn/parallel/distributed.py DistributedDataParallel.no_sync).
    # FSDP2: gradient sync stays on, a reduce-scatter every micro-batch into
    # the sharded fp32 gradients; FSDPModule has no no_sync
    # (torch/distributed/fsdp/_fully_shard/_fully_shard.py), and
    # set_requires_gradient_sync(False) would hold the whole unsharded gradient
    # in fp32 (_fsdp_param.py unsharded_accumulated_grad), memory the plan does
    # not have.  Plan ZeRO >= 2 with dp > 1 runs FSDP2, ZeRO 0/1 with dp > 1
    # runs DDP.
    mode = "fsdp" if zero >= 2 and dp > 1 else "ddp" if dp > 1 else None
    fsdp_methods = set(names["torch.distributed.fsdp.FSDPModule"].get("methods", []))
    ddp_methods = set(names["torch.nn.parallel.DistributedDataParallel"].get("methods", []))
    sync_calls, nosync_uses, hasattr_nosync = [], [], []
    for n in reachable:
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "set_requires_gradient_sync":
            sync_calls.append(n)
        if isinstance(n, ast.Attribute) and n.attr == "no_sync":
            nosync_uses.append(n)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "hasattr" and len(n.args) == 2 \
                and isinstance(n.args[1], ast.Constant) and n.args[1].value == "no_sync":
            hasattr_nosync.append(n)
    if mode and accum and accum > 1:
        if mode == "fsdp":
            assert "no_sync" not in fsdp_methods
            assert "set_requires_gradient_sync" in fsdp_methods
            for u in nosync_uses:
                if not hasattr_nosync and id(u) not in guarded:
                    P.add("python: FSDP2 module has no no_sync() (AttributeError); FSDP2 plans keep gradient sync on",
                          u.lineno)
            for c in sync_calls:
                if c.args and isinstance(c.args[0], ast.Constant) and c.args[0].value is True:
                    continue
                P.add(f"python: plan zero={zero} dp={dp} runs FSDP2 with {accum} micro-batches, simulated with a "
                      "reduce-scatter every micro-batch, but the script can turn gradient sync off "
                      "(set_requires_gradient_sync): FSDP2 then holds the whole unsharded gradient in fp32 until "
                      "the last micro-batch, memory the plan does not have", c.lineno)
        else:
            assert "no_sync" in ddp_methods
            if not nosync_uses:
                P.add(f"python: plan zero={zero} dp={dp} runs DDP with {accum} micro-batches but the script never "
                      "enters model.no_sync(): every micro-batch all-reduces gradients")
            for c in sync_calls:
                if id(c) not in guarded:
                    P.add("python: DistributedDataParallel has no set_requires_gradient_sync (AttributeError)",
                          c.lineno)


def launch_comment_rules(text: str, tor: dict, plan: dict, nodes_opt: int | None, P: Problems) -> None:
    """The script documents its torchrun command in a comment; that command
    must be valid bash and obey the same torchrun rules as a launcher script."""
    lines = text.splitlines()
    for i, l in enumerate(lines):
        m = re.match(r"^#\s+(torchrun\b.*)$", l)
        if not m:
            continue
        cmd, j = m.group(1), i
        while cmd.rstrip().endswith("\\") and j + 1 < len(lines):
            j += 1
            cmd = cmd.rstrip()[:-1] + " " + re.sub(r"^#\s*", "", lines[j]).strip()
        cmd = cmd.replace("<this file>", "train.py")
        r = subprocess.run(["bash", "-n"], input=cmd + "\n", capture_output=True, text=True)
        if r.returncode != 0:
            P.add(f"launch comment: bash -n: {r.stderr.strip().splitlines()[0] if r.stderr.strip() else r.returncode}",
                  i + 1)
            return
        sub = Problems(P.path)
        check_torchrun(BashScript(cmd + "\n"), tor, plan, nodes_opt, sub)
        for item in sub.items:
            P.add("launch comment: " + item.split(": ", 1)[1], i + 1)
        return


# ---------------------------------------------------------------------------


def load_data(d: str, name: str) -> dict:
    with open(os.path.join(d, name), encoding="utf-8") as f:
        return json.load(f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, choices=["megatron", "deepspeed", "fsdp"])
    ap.add_argument("--plan", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--data-dir", default=DEFAULT_DATA)
    a = ap.parse_args(argv)
    try:
        plan = load_plan(a.plan)
        with open(a.file, encoding="utf-8") as f:
            text = f.read()
    except (OSError, ValueError) as e:
        print(f"check_export: {e}", file=sys.stderr)
        return 2
    P = Problems(a.file)
    meg = load_data(a.data_dir, "megatron_lm.json")
    tor = meg["torchrun"]

    if a.target == "megatron":
        bash_syntax(a.file, P) or apostrophe_in_expansion(text, P)
        s = BashScript(text)
        for n, e in s.tokenize_errors:
            P.add(f"bash: cannot tokenize: {e}", n)
        r = check_torchrun(s, tor, plan, a.nodes, P)
        if r is not None:
            if r["script"] is not None and not r["script"][1].endswith(".py"):
                P.add(f"megatron: training script {r['script'][1]!r} is not a Python file")
            ns, given = check_args(s, r["post"], meg["args"], meg["parser"]["allow_abbrev"], "megatron", P)
            megatron_rules(ns, given, plan, s, P)
    elif a.target == "deepspeed":
        ds = load_data(a.data_dir, "deepspeed_config.json")
        if text.lstrip().startswith("{"):
            cfg = load_json_no_dups(text, P, "deepspeed config")
            if cfg is not None:
                # A plain config runs on DeepSpeedEngine with the launcher's
                # world as the data-parallel group (no tp/pp); a PipelineModule
                # would be needed for pp > 1.
                if plan["tp"] > 1 or plan["pp"] > 1:
                    P.add(f"deepspeed config: a plain DeepSpeed config has no tensor/pipeline parallelism, the plan "
                          f"has tp={plan['tp']} pp={plan['pp']}")
                deepspeed_config_rules(cfg, ds, plan, "deepspeed config", P, tp=plan["tp"], pp=plan["pp"],
                                       pipeline_engine=plan["pp"] > 1)
        else:
            mds = load_data(a.data_dir, "megatron_deepspeed.json")
            bash_syntax(a.file, P) or apostrophe_in_expansion(text, P)
            s = BashScript(text)
            for n, e in s.tokenize_errors:
                P.add(f"bash: cannot tokenize: {e}", n)
            r = check_torchrun(s, tor, plan, a.nodes, P)
            if r is not None:
                ns, given = check_args(s, r["post"], mds["args"], mds["parser"]["allow_abbrev"], "megatron-deepspeed", P)
                megatron_deepspeed_rules(ns, given, plan, s, ds, P)
    else:
        api = load_data(a.data_dir, "pytorch_api.json")
        fsdp_rules(text, plan, api, P, a.nodes)
        launch_comment_rules(text, tor, plan, a.nodes, P)

    for line in P.items:
        print(line)
    return 1 if P.items else 0


if __name__ == "__main__":
    sys.exit(main())

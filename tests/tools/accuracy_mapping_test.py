"""The ACCURACY.md mapping rules as tools/accuracy.py applies them, so that the figures reported on the dev rows
mean what the held-back comparison means.  Oracles: the rule text's own examples and wording (quoted per check),
and for the cluster rule the sources' own figures."""
import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import accuracy  # noqa: E402

GRAND_TETON = "H100 (96GB HBM2e, SXM-class, 500W power limit; Grand Teton)"


class HbmBandwidth(unittest.TestCase):
    def test_grand_teton_h100_matches_the_stated_figure(self):
        # pytorch/torchtitan benchmarks/ (both Grand Teton files): "96GB HBM2e with 2.4 TB/sec peak memory
        # bandwidth".  Derived: 96 / 16 GB = 6 stacks x 409.6 GB/s = 2457.6 GB/s, 2.4% above the rounded figure.
        gbs = accuracy.hbm_bandwidth_gbs("HBM2e", 96, "NVIDIA H100 datasheet: 80 GB HBM3, 3.35 TB/s")
        self.assertAlmostEqual(gbs, 2457.6, places=6)
        self.assertLess(abs(gbs / 2400.0 - 1), 0.03)

    def test_a100_80gb_matches_its_datasheet(self):
        # A100 80GB SXM datasheet: HBM2e, 2,039 GB/s (5 stacks).  Derived 5 x 409.6 = 2048 GB/s (+0.4%).
        gbs = accuracy.hbm_bandwidth_gbs("HBM2e", 80, "a part with HBM3")
        self.assertLess(abs(gbs / 2039.0 - 1), 0.01)

    def test_nothing_changes_without_a_different_stated_technology(self):
        self.assertIsNone(accuracy.hbm_bandwidth_gbs(None, 96, "80 GB HBM3"))
        self.assertIsNone(accuracy.hbm_bandwidth_gbs("HBM2e", 80, "A100 80GB HBM2e, 2,039 GB/s"))
        self.assertIsNone(accuracy.hbm_bandwidth_gbs("HBM3", 96, "80 GB HBM2e"))  # not listed: left as built
        self.assertIsNone(accuracy.hbm_bandwidth_gbs("HBM2e", 40, "80 GB HBM3"))  # not whole 16 GB stacks


class DerivedCluster(unittest.TestCase):
    def test_grand_teton_row_changes_exactly_its_three_figures(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = accuracy.derived_cluster({"id": "t", "hardware": {"gpu": GRAND_TETON}}, "dgx-h100", tmp)
            with open(path) as f:
                derived = json.load(f)
        with open(os.path.join(ROOT, "topologies", "dgx-h100.json")) as f:
            built = json.load(f)
        self.assertEqual(derived["gpu"]["power_limit_w"], 500)
        self.assertEqual(derived["gpu"]["hbm_bandwidth"], "2457.6GB/s")
        # nvidia-smi's 81559 MiB for the 80 GB part, scaled by 96/80.
        self.assertEqual(derived["gpu"]["memory"], "%dMiB" % round(81559 * 96 / 80))
        changed = {k for k in built["gpu"] if built["gpu"][k] != derived["gpu"].get(k)} - {"source"}
        self.assertEqual(changed, {"memory", "hbm_bandwidth"})  # power_limit_w is new, not changed
        self.assertEqual({k: v for k, v in built.items() if k not in ("gpu", "name", "source")},
                         {k: v for k, v in derived.items() if k not in ("gpu", "name", "source")})

    def test_a_row_that_states_nothing_keeps_the_built_in_cluster(self):
        row = {"id": "t", "hardware": {"gpu": "A100-SXM4-80GB"}}
        self.assertEqual(accuracy.derived_cluster(row, "dgx-a100", "/nonexistent"), "dgx-a100")


class MetricRule(unittest.TestCase):
    def test_t1_mfu_after_the_flop_rates(self):
        # T1: "step_time_s when measured; else TFLOP/s per GPU ...; else MFU; else tokens/s per GPU".
        lay = {"tp": 1, "pp": 1, "micro_batch": 1, "global_batch": 8}
        base = {"id": "x", "model": {"seq_len": 2048, "layers": 2, "hidden": 64, "heads": 4},
                "hardware": {"gpus": 8, "gpu": "H100"},
                "layout": lay, "source": "2024"}
        def mapped(meas):
            return accuracy.flags_for(dict(base, measured=meas), FAKE_CLI)[2:]
        self.assertEqual(mapped({"mfu": 0.41, "tokens_per_s_per_gpu": 100})[2], "mfu")
        self.assertEqual(mapped({"mfu": 41, "tokens_per_s_per_gpu": 100})[1], 0.41)  # a printed percentage
        self.assertEqual(mapped({"tflops_per_gpu": 400, "mfu": 0.41})[2], "model_tflops_per_gpu")
        self.assertEqual(mapped({"step_time_s": 1.0, "mfu": 0.41})[2], "step_time_s")
        self.assertEqual(mapped({"tokens_per_s_per_gpu": 100})[2], "tokens_per_s_per_gpu")
        # "tokens/s per GPU (= tokens_per_s / gpus)": a job's total over its 8 GPUs; samples/s the same way.
        self.assertEqual(mapped({"tokens_per_s": 800})[1:], (100, "tokens_per_s_per_gpu"))
        self.assertEqual(mapped({"samples_per_s": 4})[1:], (0.5, "samples_per_s_per_gpu"))
        self.assertIsNone(accuracy.flags_for(dict(base, measured={"tokens_per_s": 0}), FAKE_CLI))
        self.assertIsNone(accuracy.mfu_of({"mfu": None}))


class ClusterRule(unittest.TestCase):
    def test_accuracy_md_examples(self):
        # ACCURACY.md: "A100 on Omni-Path -> jean-zay-a100, other A100 -> dgx-a100, H100 -> dgx-h100, H200 ->
        # dgx-h200, B200 -> dgx-b200"; the racks and parts built in since map to theirs; TPUs are not expressible.
        def c(gpu, inter=""):
            return accuracy.cluster_for({"hardware": {"gpu": gpu, "inter_node": inter}})
        self.assertEqual(c("A100-SXM4-80GB", "Omni-Path 100 Gb/s, 4 NICs per node"), "jean-zay-a100")
        self.assertEqual(c("A100-SXM4-80GB"), "dgx-a100")
        self.assertEqual(c("H100-SXM5-80GB (DGX-H100)"), "dgx-h100")
        self.assertEqual(c("H200 SXM (8 GPUs, one node)"), "dgx-h200")
        self.assertEqual(c("NVIDIA B200 SXM"), "dgx-b200")
        self.assertEqual(c("B300 (DGX-B300)"), "dgx-b300")
        self.assertEqual(c("GB200 (DGX-GB200 NVL72)"), "gb200-nvl72")  # a GB200, not a B200
        self.assertEqual(c("DGX-GB300"), "gb300-nvl72")
        self.assertEqual(c("NVIDIA H100 SXM (H200 same)"), "dgx-h100")  # the part named first
        self.assertEqual(c("H800 (SXM, 80GB)"), "hgx-h800")  # a built-in whose hardware matches
        for other in ("Cloud TPUv3 (16GB per core)", "NVIDIA GH200 SXM (900W, 141GiB)", "MI300X"):
            self.assertIsNone(c(other), other)
        for name in set(accuracy.BUILTIN_CLUSTERS.values()) | {"jean-zay-a100"}:
            self.assertTrue(os.path.exists(os.path.join(ROOT, "topologies", name + ".json")), name)

    def test_moe_rows_take_the_derived_cluster_rule(self):
        # A stated power limit changes the built-in cluster for an MoE row as for a dense one.
        with tempfile.TemporaryDirectory() as tmp:
            path = accuracy.moe_cluster_for({"id": "t", "hardware": {"gpu": GRAND_TETON}}, tmp)
            with open(path) as f:
                self.assertEqual(json.load(f)["gpu"]["power_limit_w"], 500)
            self.assertEqual(accuracy.moe_cluster_for({"id": "t", "hardware": {"gpu": "B200 (DGX-B200)"}}, tmp),
                             "dgx-b200")


def row(layout, gpus=64, seq=2048, **extra):
    return dict({"id": "x", "model": {"seq_len": seq}, "hardware": {"gpus": gpus}, "layout": layout}, **extra)


class ModelRules(unittest.TestCase):
    def test_m2_vocab_padding_examples(self):
        # M2: "GPT-2 BPE (50257) padded to a multiple of 128*tp ... e.g. tp 8 -> 51200, tp 1 -> 50304".
        self.assertEqual(accuracy.padded_gpt2_vocab(8), 51200)
        self.assertEqual(accuracy.padded_gpt2_vocab(1), 50304)
        self.assertEqual(accuracy.padded_gpt2_vocab(2) % 256, 0)


class LayoutRules(unittest.TestCase):
    def test_l2_zero_stage(self):
        # L2: "int as printed; 'FSDP (optimizer+grad sharded, params kept after fwd)' -> 2; other FSDP / FSDP2 /
        # Megatron-FSDP / 'full shard' -> 3; 'DDP' -> 0; null -> 0, except when the row's overlap field lists
        # --overlap-param-gather -> 1."
        z = accuracy.zero_of
        self.assertEqual(z({"zero_stage": 1}), 1)
        self.assertEqual(z({"zero_stage": "FSDP (optimizer+grad sharded, params kept after fwd)"}), 2)
        for text in ("FSDP", "FSDP2", "Megatron-FSDP", "full shard"):
            self.assertEqual(z({"zero_stage": text}), 3, text)
        self.assertEqual(z({"zero_stage": "DDP"}), 0)
        self.assertEqual(z({"zero_stage": None}), 0)
        self.assertEqual(z({"zero_stage": None, "overlap": "--overlap-grad-reduce --overlap-param-gather"}), 1)

    def test_l4_global_batch(self):
        # L4: "layout.global_batch; else batch_size_per_dp_group * dp; else micro_batch * num_microbatches; else
        # local_batch * dp; a '<N>M tokens' string -> N*2^20/seq rounded to the nearest multiple of dp*mbs."
        g = accuracy.global_batch_of
        self.assertEqual(g(row({"tp": 8, "pp": 1, "global_batch": 1536})), 1536)
        self.assertEqual(g(row({"tp": 8, "pp": 2, "batch_size_per_dp_group": 16})), 16 * 4)
        self.assertEqual(g(row({"tp": 1, "pp": 8, "micro_batch": 6, "num_microbatches": 24}, gpus=8)), 144)
        self.assertEqual(g(row({"tp": 1, "pp": 1, "local_batch": 2}, gpus=8)), 16)
        # 4M tokens at seq 2048 on dp 8, mbs 2: 4 * 2^20 / 2048 = 2048 sequences, a multiple of 16 already;
        # 3.1M tokens: 1587.2 -> the nearest multiple of 16 is 1584.
        self.assertEqual(g(row({"tp": 8, "pp": 1, "micro_batch": 2, "global_batch": "4M tokens"})), 2048)
        self.assertEqual(g(row({"tp": 8, "pp": 1, "micro_batch": 2, "global_batch": "3.1M tokens"})), 1584)

    def test_l5_recompute(self):
        # L5: "first word of layout.recompute if none/selective/full; 're-materialization' -> full; 'selective +
        # microbatch-level' -> selective; anything else (null, 'not stated') -> none."
        r = accuracy.recompute_of
        self.assertEqual(r({"recompute": "full (uniform)"}), "full")
        self.assertEqual(r({"recompute": "selective + microbatch-level"}), "selective")
        self.assertEqual(r({"recompute": "re-materialization"}), "full")
        self.assertEqual(r({"recompute": "not stated"}), "none")
        self.assertEqual(r({"recompute": None}), "none")

    def test_what_the_rules_flag(self):
        # L1 "a printed dp that disagrees is flagged, not used"; L5 "'selective + microbatch-level' -> selective
        # (flagged: microbatch-level recompute is not modelled)"; L7 'vp string "interleaved (... not stated)" ->
        # interleaved, vp 2 (the least interleaving; flagged)'.
        f = accuracy.rule_flags
        self.assertEqual(f(row({"tp": 8, "pp": 2, "dp": 4})), [])  # 64 / 16 = 4
        self.assertEqual(f(row({"tp": 8, "pp": 2, "dp": 8})), ["L1: printed dp 8, gpus / (tp*pp*cp) = 4 used"])
        self.assertEqual(f(row({"tp": 8, "pp": 1, "recompute": "selective + microbatch-level"})),
                         ["L5: microbatch-level recompute not modelled"])
        self.assertEqual(f(row({"tp": 8, "pp": 2, "vp": "interleaved (chunks not stated)"})),
                         ["L7: interleaving depth not stated, vp 2"])
        self.assertEqual(f(row({"tp": 1, "pp": 8, "vp": "max chunks: 1 layer per chunk"})), [])  # its own rule
        self.assertIn("none", accuracy.flagged_line([]))

    def test_l7_gpipe(self):
        # L7: '"GPipe" -> gpipe', as GPipe's own rows print it ("GPipe (all-F then all-B, flush)").
        s = accuracy.schedule_flags
        self.assertEqual(s(row({"tp": 1, "pp": 4, "schedule": "GPipe (all-F then all-B, flush)"}), FAKE_CLI),
                         ["--schedule", "gpipe"])
        self.assertEqual(s(row({"tp": 1, "pp": 4, "schedule": "gpipe"}), FAKE_CLI), ["--schedule", "gpipe"])
        self.assertEqual(s(row({"tp": 1, "pp": 4, "schedule": "1F1B"}), FAKE_CLI), [])


class SourceRules(unittest.TestCase):
    def test_l10_source_year(self):
        # L10 needs the source's date: "naive for sources dated <= 2022, else flash".
        self.assertEqual(accuracy.source_year({"id": "narayanan21_x", "source": "Narayanan et al. 2021 (SC'21)"}),
                         2021)
        self.assertEqual(accuracy.source_year({"id": "mcore24_x", "source": "Megatron-LM README"}), 2024)

    def test_f1_framework(self):
        # F1: "Megatron-Core / NeMo / Megatron-Bridge -> the Megatron-Core profile; Megatron-LM papers of 2021-22 ->
        # the Megatron-LM profile; DeepSpeed ZeRO-3 and Megatron-DeepSpeed runs -> DeepSpeed; torchtitan ->
        # torchtitan; FSDP runs -> PyTorch FSDP."
        f = accuracy.framework_for
        self.assertEqual(f({"id": "a", "source": "NeMo 24.07 performance", "layout": {}}), "megatron-core")
        self.assertEqual(f({"id": "narayanan21_t1", "source": "Narayanan et al. 2021", "layout": {}}), "megatron-lm")
        self.assertEqual(f({"id": "b", "source": "x", "layout": {"framework": "Megatron-DeepSpeed"}}), "deepspeed")
        self.assertEqual(f({"id": "torchtitan_t1", "source": "x", "layout": {}}), "torchtitan")
        self.assertEqual(f({"id": "c", "source": "a PyTorch FSDP run", "layout": {}}), "pytorch")


def validation_rows(name):
    """The "rows" of tests/data/validation/<name>, a transcribed published table."""
    with open(os.path.join(ROOT, "tests", "data", "validation", name)) as f:
        return json.load(f)["rows"]


class WeakScalingFacts(unittest.TestCase):
    """tests/data/validation/megatron_weak_scaling.json, transcribed from the Megatron-LM README's model table
    (tools/wider_check.py): each row checked against the table's own other columns."""

    def setUp(self):
        self.rows = validation_rows("megatron_weak_scaling.json")

    def test_model_size_matches_the_shape(self):
        # A GPT layer holds 12h^2 + 13h parameters (QKV, projection, 4h MLP, biases, two norms); the input and
        # output embeddings V x h each (V = 131,072: the table's sizes count both, e.g. 7.1B = 12 x 30 x 4096^2
        # = 6.04B + 2 x 0.54B) and 4096 learned positions 4096 h.  Every "Model size" must come out within 4%
        # (1.7B: 1.208B + 0.537B + 0.008B = 1.753B, +3.1%, the coarsest rounding in the column).
        for r in self.rows:
            h, l = r["hidden"], r["layers"]
            params = 12 * l * h * h + 13 * l * h + (2 * 131072 + 4096) * h
            size = float(r["model_size"].rstrip("B")) * 1e9
            self.assertLess(abs(params / size - 1), 0.04, r["model_size"])

    def test_layout_columns_agree(self):
        # GPUs = TP x PP x DP (DP 48 throughout), and the printed MFU is TFLOP/s over the H100's 989 dense bf16
        # TFLOP/s, rounded to a percent (1.7B: 408.8 / 989 = 41.3% -> 41%).
        for r in self.rows:
            self.assertEqual(r["gpus"], r["tp"] * r["pp"] * r["dp"], r["model_size"])
            self.assertEqual(round(100 * r["tflops_per_gpu"] / 989), round(100 * r["mfu"]), r["model_size"])


class BloomSweepFacts(unittest.TestCase):
    """tests/data/validation/bloom_prequel_sweep.json, transcribed from bigscience's chronicles-prequel.md
    (tools/wider_check.py): each row checked against the table's own other columns."""

    def setUp(self):
        self.rows = validation_rows("bloom_prequel_sweep.json")

    def test_every_layout_fills_the_48_nodes(self):
        for r in self.rows:
            self.assertEqual(r["dp"] * r["tp"] * r["pp"], 384, r)

    def test_step_time_and_tflops_columns_agree(self):
        # TFLOP/s = FLOPs of a step / (step time x 384 GPUs), one FLOP count per model shape and sequence, so
        # TFLOP/s x step time / global batch is one constant per shape (the source prints both columns; all rows
        # here use the corrected estimator of PR #251).  h14336/l72: 143.31 s x 112.49 / 2048 = 7.872.
        per_shape = {}
        for r in self.rows:
            per_shape.setdefault((r["hidden"], r["layers"]), []).append(
                r["tflops_per_gpu"] * r["step_time_s"] / r["global_batch"])
        self.assertAlmostEqual(per_shape[(14336, 72)][0], 143.31 * 112.49 / 2048, places=6)
        for shape, values in per_shape.items():
            self.assertLess(max(values) / min(values) - 1, 0.01, shape)


class NarayananTable1Facts(unittest.TestCase):
    """tests/data/validation/narayanan21_table1.json: Table 1 (the README image) with run_table_1.sh's layout
    columns, checked against the table's own other columns."""

    def setUp(self):
        self.rows = validation_rows("narayanan21_table1.json")

    def test_parameters_match_the_shape(self):
        # The paper's count (Sec. 5.1): P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), V = 51,200, s = 2048;
        # e.g. 1T: 12 x 128 x 25600^2 = 1006.6B + 1.4B = 1008.0B.  The table prints one decimal, so the count
        # must round to it: within half a unit of the last digit (1.652B -> 1.7 needs 0.05B; 1008.04 -> 1008.0).
        for r in self.rows:
            l, h = r["layers"], r["hidden"]
            p = 12 * l * h * h * (1 + 13 / (12 * h) + (51200 + 2048) / (12 * l * h))
            self.assertLessEqual(abs(p / 1e9 - r["params_b"]), 0.05, r["model_size"])

    def test_layouts_divide(self):
        # The script's model-parallel size TP x PP times the data-parallel size is the GPU count, and the
        # global batch is whole micro-batches on every data-parallel rank; the virtual stages divide a stage.
        for r in self.rows:
            mp = r["tp"] * r["pp"]
            self.assertEqual(r["gpus"] % mp, 0, r["model_size"])
            self.assertEqual(r["global_batch"] % (r["gpus"] // mp * r["micro_batch"]), 0, r["model_size"])
            if r["layers_per_virtual_stage"]:
                self.assertEqual((r["layers"] // r["pp"]) % r["layers_per_virtual_stage"], 0, r["model_size"])


class Nemo2407Facts(unittest.TestCase):
    """tests/data/validation/nemo_2407_perf.json: NeMo 24.07's pre-training table with the launcher configs'
    model shapes (tools/wider_check.py), checked against the table's own other columns."""

    def setUp(self):
        with open(os.path.join(ROOT, "tests", "data", "validation", "nemo_2407_perf.json")) as f:
            facts = json.load(f)
        self.rows, self.models = facts["rows"], facts["models"]

    def test_printed_flop_rate_matches_the_shapes(self):
        # The table's model TFLOP/s over its tokens/s is NeMo's FLOPs per token, which for these shapes is
        # 6 x (matmul parameters + V h) + 12 l s h (attention over the full s x s product, forward and backward):
        # per layer h (h + 2 kv_dim) QKV + h^2 projection + m h f MLP, m = 3 for the Llamas' SwiGLU and 2 for
        # GPT3's GeLU and Nemotron-4's squared ReLU (its launcher config), V the padded GPT-2 vocabulary 50304
        # where none is stated.  LLAMA2-7B: 6 x (32 x 202.4M + 131M) + 6.44G = 46.08G against 780e12 / 16934 =
        # 46.06G.  A wrong shape or a mistyped column moves a row by more than the 0.5% allowed (the largest
        # agreement gap is GPT3-5B's 0.12%).
        checked = 0
        for r in self.rows:
            m = self.models[r["model"]]
            if m["layers"] is None:
                continue
            l, h, heads, kv, f = m["layers"], m["hidden"], m["heads"], m["kv_heads"], m["ffn_hidden"]
            v = m["vocab"] or 50304
            mats = 3 if r["model"].startswith("LLAMA") else 2
            kv_dim = h // heads * kv
            flops = 6 * (l * (h * (h + 2 * kv_dim) + h * h + mats * h * f) + v * h) + 12 * l * r["seq_len"] * h
            printed = r["model_tflops_per_gpu"] * 1e12 / r["tokens_per_s_per_gpu"]
            self.assertLess(abs(printed / flops - 1), 0.005, r["model"])
            checked += 1
        self.assertEqual(checked, 10)  # every row but Nemotron-8B/22B (no published shape)

    def test_layouts_divide(self):
        # GPUs = TP x PP x CP x DP, the global batch is whole micro-batches on every data-parallel rank, and the
        # virtual stages split the layers evenly (Megatron's interleaved schedule requires it).
        for r in self.rows:
            mp = r["tp"] * r["pp"] * r["cp"]
            self.assertEqual(r["gpus"] % mp, 0, r["model"])
            self.assertEqual(r["global_batch"] % (r["gpus"] // mp * r["micro_batch"]), 0, r["model"])
            layers = self.models[r["model"]]["layers"]
            if layers and r["vp"] > 1:
                self.assertEqual(layers % (r["pp"] * r["vp"]), 0, r["model"])

    def test_rows_without_a_shape_are_not_expressible(self):
        # Rule M3: layers/hidden/heads null -> not expressible (Nemotron-8B and -22B).
        row = {"model": {"layers": None, "hidden": None, "heads": None}, "layout": {"tp": 2, "pp": 1},
               "measured": {}, "hardware": {"gpus": 64}}
        self.assertIsNone(accuracy.flags_for(row, "trainplan"))


# A help text that offers every option the MoE rules look for (cli_offers reads `trainplan simulate --help`).
FAKE_CLI = "fake-trainplan"
accuracy._HELP[FAKE_CLI] = ("--ep --etp --vp --mtp-layers --recompute-modules --framework megatron-core --moe-dispatcher "
                            "--moment-dtype --precision fp8 --schedule gpipe|1f1b|zb-1p|dualpipe-v|dualpipe --ep-overlap "
                            "--offload none|optimizer|params")

# DeepSeek-V3's report row as published_moe_dev.json writes it (the fields the rules read).
DSV3_REPORT = {
    "id": "dsv3_report", "kind": "derived_throughput",
    "model": {"layers": 61, "hidden": 7168, "heads": 128, "kv_heads": 128, "ffn_hidden": 18432, "vocab": 129280,
              "seq_len": 4096, "mtp_layers": 1},
    "attention": "mla",
    "mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128},
    "moe": {"experts": 256, "top_k": 8, "expert_ffn_hidden": 2048, "shared_experts": 1, "dense_layers_first": 3,
            "capacity_factor": None,
            "router": "sigmoid scores, group-limited top-8 (8 groups, top-4 groups), aux-loss-free expert bias + "
                      "small sequence aux loss, top-k scaling 2.5"},
    "hardware": {"gpu": "H800 (SXM, 80GB; Hopper with reduced NVLink)", "gpus": 2048, "gpus_per_node": 8,
                 "intra_node": "NVLink/NVSwitch, ~160 GB/s per GPU as stated in the report",
                 "inter_node": "InfiniBand 400 Gb/s (~50 GB/s) per GPU, fat-tree"},
    "layout": {"tp": 1, "pp": 16, "cp": 1, "ep": 64, "etp": 1, "micro_batch": None,
               "vp": "DualPipe (bidirectional schedule; each rank holds chunks from both ends, 2x parameter copies)",
               "zero_stage": "ZeRO-1 data parallel",
               "precision": ("FP8 GEMMs (1x128 activation tiles, 128x128 weight blocks, E4M3) with BF16/FP32 "
                             "elsewhere; BF16 AdamW moments, FP32 master weights"),
               "recompute": "RMSNorm and MLA up-projection recomputed in backward; EMA kept in CPU memory",
               "global_batch": "3072 -> 15360 sequences ramp over first 469B tokens, then 15360",
               "framework": "HAI-LLM (in-house)",
               "token_dispatcher": "custom all-to-all kernels, IB then NVLink forwarding, 20 SMs for communication; "
                                   "node-limited routing (<=4 nodes per token)"},
    "measured": {"h800_gpu_hours_per_trillion_tokens": 180000},
    "derived": {"tokens_per_s_per_gpu": 1543.2},
    "notes": "16-way PP with DualPipe, 64-way EP across 8 nodes, ZeRO-1 DP, no TP; MTP depth 1 (not counted in the "
             "6N TFLOP/s).",
    "source": "DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report'",
}


class MoeRules(unittest.TestCase):
    def test_h800_is_the_built_in_h800(self):
        # ACCURACY.md cluster rule: "a built-in cluster where the hardware matches".  hgx-h800 is DeepSeek's H800
        # node; the row's "~160 GB/s per GPU" of NVLink (report Sec. 3.2.2) is what its 8 links give by NCCL's
        # per-link figure (src/graph/topo.h SM90_NVLINK_BW 20.6 GB/s: 8 x 20.6 = 164.8 GB/s, 3% above the rounded figure), and its
        # 50 GB/s of InfiniBand per GPU what the built-in's 8 x 400 Gb/s NICs give: nothing to derive.
        with tempfile.TemporaryDirectory() as tmp:
            self.assertEqual(accuracy.moe_cluster_for(DSV3_REPORT, tmp), "hgx-h800")
        with open(os.path.join(ROOT, "topologies", "hgx-h800.json")) as f:
            built = json.load(f)
        links = float(built["intra_node"]["bandwidth"].replace("GB/s", "")) / 25  # NVLink4: 25 GB/s a link
        self.assertEqual(links, 8)
        self.assertLess(abs(links * 20.6 / 160 - 1), 0.05)
        self.assertEqual(built["inter_node"]["nics_per_node"] * 400 / 8 / built["gpus_per_node"], 50)

    def test_dispatcher_m5(self):
        d = accuracy.moe_dispatcher_for
        self.assertEqual(d(DSV3_REPORT["layout"]), "deepep")  # "IB then NVLink forwarding": DeepEP's normal kernels
        self.assertEqual(d({"token_dispatcher": "flex (DeepEP)"}), "deepep")
        self.assertEqual(d({"token_dispatcher": "alltoall (NCCL)"}), "alltoall")
        self.assertIsNone(d({"token_dispatcher": None}))

    def test_global_batch_after_its_ramp(self):
        # "3072 -> 15360 sequences ramp over first 469B tokens, then 15360": 15360 holds for 97% of the 14.8T tokens.
        self.assertEqual(accuracy.moe_global_batch_of(DSV3_REPORT["layout"]), 15360)
        self.assertEqual(accuracy.moe_global_batch_of({"global_batch": 512}), 512)
        self.assertIsNone(accuracy.moe_global_batch_of({"global_batch": "not stated"}))

    def test_model_carries_the_router_groups(self):
        # "group-limited top-8 (8 groups, top-4 groups)": DeepSeek-V3's n_group 8, topk_group 4.
        with tempfile.TemporaryDirectory() as tmp:
            with open(accuracy.moe_model_file(DSV3_REPORT, tmp)) as f:
                moe = json.load(f)["moe"]
        self.assertEqual((moe["router_groups"], moe["router_group_topk"]), (8, 4))
        self.assertEqual((moe["router"], moe["load_balancing"]), ("sigmoid", "aux_free"))

    def test_report_row_flags(self):
        flags, metric, measured, key = accuracy.moe_flags_for(DSV3_REPORT, FAKE_CLI)
        f = " ".join(flags)
        for part in ("--pp 16", "--ep 64", "--mbs 1", "--gbs 15360", "--schedule dualpipe", "--mtp-layers 1",
                     "--moe-dispatcher deepep", "--precision fp8", "--zero 1"):
            self.assertIn(part, f)
        self.assertNotIn("--framework", f)  # HAI-LLM: no profile, trainplan's generic executor
        self.assertEqual((measured, key), (1543.2, "tokens_per_s_per_gpu"))

    def test_bf16_moments_where_the_row_says_so(self):
        # The report's precision field: "BF16 AdamW moments, FP32 master weights" (Sec. 3.3.3) under ZeRO-1.
        flags = " ".join(accuracy.moe_flags_for(DSV3_REPORT, FAKE_CLI)[0])
        self.assertIn("--moment-dtype bf16", flags)
        lay = {"precision": "BF16 AdamW moments, FP32 master weights"}
        self.assertEqual(accuracy.moment_flags(lay, 0, FAKE_CLI), [])  # needs the sharded optimizer
        self.assertEqual(accuracy.moment_flags({"precision": "BF16"}, 1, FAKE_CLI), [])
        accuracy._HELP["no-moments"] = accuracy._HELP[FAKE_CLI].replace("--moment-dtype ", "")
        self.assertEqual(accuracy.moment_flags(lay, 1, "no-moments"), [])

    def test_mtp_only_where_the_run_trained_it(self):
        # Megatron-Bridge's "DeepSeekV3 (w/o MTP)" row: the model has an MTP module, the benchmark did not run it.
        row = json.loads(json.dumps(DSV3_REPORT))
        row.update(kind="measured_throughput", measured={"model_tflops_per_gpu": 782},
                   notes="25.11 DGX-GB200 row 'DeepSeekV3 (w/o MTP)': GA 64")
        row["layout"].update(vp=4, micro_batch=1, global_batch=4096, pp=4)
        flags = accuracy.moe_flags_for(row, FAKE_CLI)[0]
        self.assertNotIn("--mtp-layers", flags)
        self.assertNotIn("dualpipe", flags)
    def test_moe_rows_take_the_dense_schedule_rule(self):
        # L7: 'vp string "interleaved (... not stated)" -> interleaved, vp 2'; 'pp > 1 otherwise -> 1f1b'; DualPipe
        # only once the CLI offers it.
        row = json.loads(json.dumps(DSV3_REPORT))
        row["layout"]["vp"] = "interleaved (not stated)"
        self.assertIn("--vp 2", " ".join(accuracy.moe_flags_for(row, FAKE_CLI)[0]))
        row["layout"]["vp"] = "balanced by the in-house framework"
        flags = accuracy.moe_flags_for(row, FAKE_CLI)[0]
        self.assertNotIn("--vp", flags)
        self.assertNotIn("--schedule", flags)
        accuracy._HELP["no-dualpipe"] = accuracy._HELP[FAKE_CLI].replace("|dualpipe-v|dualpipe", "")
        self.assertIsNone(accuracy.moe_flags_for(DSV3_REPORT, "no-dualpipe"))

    def test_moe_rows_take_the_dense_zero_and_precision_rules(self):
        # L2: an int as printed, FSDP -> 3; the distributed optimizer -> 1 (MoE rule).  L9: "BF16" -> bf16.
        row = json.loads(json.dumps(DSV3_REPORT))
        for printed, zero in ((1, "1"), ("FSDP2", "3"), ("distributed optimizer (ZeRO-1-like)", "1")):
            row["layout"]["zero_stage"] = printed
            flags = accuracy.moe_flags_for(row, FAKE_CLI)[0]
            self.assertEqual(flags[flags.index("--zero") + 1], zero, printed)
        row["layout"]["precision"] = "BF16"
        flags = accuracy.moe_flags_for(row, FAKE_CLI)[0]
        self.assertEqual(flags[flags.index("--precision") + 1], "bf16")


def megatron_moe_mask(freq, layers):
    """Megatron-Core's own reading of --moe-layer-freq (transformer_config / arguments.py): an int k makes layer i
    MoE when i % k == 0; a list is the per-layer mask itself."""
    return [1 if i % freq == 0 else 0 for i in range(layers)] if isinstance(freq, int) else list(freq)


def spec_moe_mask(dense, freq, layers):
    """The model spec's rule (simulator/spec/model.h is_moe_layer): layer >= dense_layers and (layer -
    dense_layers) % layer_freq == 0."""
    return [1 if i >= dense and (i - dense) % freq == 0 else 0 for i in range(layers)]


class MoePlacement(unittest.TestCase):
    def test_list_patterns_give_the_same_layers_as_megatron(self):
        # Brute force: every (leading dense, period) pattern of a 48-layer model written as Megatron writes it,
        # read back and expanded by the spec's rule, marks exactly the layers Megatron's list marks.
        for dense in range(0, 5):
            for step in range(1, 7):
                pattern = [0] * dense + [1 if j % step == 0 else 0 for j in range(48 - dense)]
                text = "[0]*%d+%s" % (dense, str(pattern[dense:]).replace(" ", ""))
                placement = accuracy.moe_placement_of({"moe_layer_freq": text}, 48)
                self.assertIsNotNone(placement, text)
                self.assertEqual(spec_moe_mask(placement[0], placement[1], 48), pattern, text)

    def test_megatron_pattern_strings(self):
        p = accuracy.moe_placement_of
        # DeepSeek-V3 in Megatron-Bridge: "[0]*3+[1]*58" (first three layers dense), as the dev rows print it.
        self.assertEqual(p({"moe_layer_freq": "[0]*3+[1]*58"}, 61), (3, 1))
        self.assertEqual(p({"moe_layer_freq": "[0]*3+[1]*58 (layers 4-61 MoE)", "dense_layers_first": 3}, 61), (3, 1))
        self.assertEqual(p({"moe_layer_freq": "([0]*3+[1]*1)*12 (one in four)"}, 48), (3, 4))
        # One MoE layer in four, the dense ones first: "([0]*3+[1]*1)*12".
        self.assertEqual(p({"moe_layer_freq": "([0]*3+[1]*1)*12"}, 48), (3, 4))
        # Llama 4 Maverick (HF interleave_moe_layer_step 2: layers 1, 3, ... are MoE).
        self.assertEqual(p({"moe_layer_freq": "[0,1]*24"}, 48), (1, 2))
        self.assertEqual(p({"moe_layer_freq": [0, 1] * 24}, 48), (1, 2))
        # Not of the spec's form, or not the model's layer count: not expressible.
        self.assertIsNone(p({"moe_layer_freq": "[1,1,0,1]"}, 4))
        self.assertIsNone(p({"moe_layer_freq": "[0]*3+[1]*50"}, 61))
        self.assertIsNone(p({"moe_layer_freq": "[0]*48"}, 48))
        self.assertIsNone(p({"moe_layer_freq": "__import__('os')"}, 48))

    def test_ints_and_words(self):
        p = accuracy.moe_placement_of
        for printed, k in ((None, 1), ("every layer", 1), (1, 1), ("1", 1), (2, 2), ("every other layer", 2),
                           ("alternating dense / MoE", 2), ("every 4 layers", 4), ("every 4th layer", 4)):
            placement = p({"moe_layer_freq": printed}, 48)
            self.assertEqual(placement, (0, k), printed)
            if isinstance(printed, int):
                self.assertEqual(spec_moe_mask(0, k, 48), megatron_moe_mask(printed, 48))
        self.assertEqual(p({"moe_layer_freq": "every layer", "dense_layers_first": 3}, 61), (3, 1))
        self.assertIsNone(p({"moe_layer_freq": 0}, 48))
        self.assertIsNone(p({"moe_layer_freq": "custom"}, 48))

    def test_the_dev_rows_placements(self):
        # The two placements published_moe_dev.json prints (its moe_layer_freq, dense_layers_first, layers).
        p = accuracy.moe_placement_of
        self.assertEqual(p({"moe_layer_freq": "every layer", "dense_layers_first": 0}, 48), (0, 1))
        self.assertEqual(p({"moe_layer_freq": "[0]*3+[1]*58 (layers 4-61 MoE)", "dense_layers_first": 3}, 61), (3, 1))

    def test_model_file_carries_the_placement(self):
        row = json.loads(json.dumps(DSV3_REPORT))
        row["moe"]["moe_layer_freq"] = "every layer"
        with tempfile.TemporaryDirectory() as tmp:
            with open(accuracy.moe_model_file(row, tmp)) as f:
                moe = json.load(f)["moe"]
            self.assertEqual(moe["dense_layers"], 3)
            self.assertNotIn("layer_freq", moe)  # the spec's default, 1
            row["moe"].update(moe_layer_freq="[0]*3+([1]+[0])*29", dense_layers_first=None)
            row["model"]["layers"] = 61
            with open(accuracy.moe_model_file(row, tmp)) as f:
                moe = json.load(f)["moe"]
            self.assertEqual((moe["dense_layers"], moe["layer_freq"]), (3, 2))
            row["moe"]["moe_layer_freq"] = "[1,0,0]*20+[1]"
            self.assertIsNotNone(accuracy.moe_model_file(row, tmp))  # 61 layers, period 3 from layer 0
            row["moe"]["moe_layer_freq"] = "[1,1,0]*20+[1]"
            self.assertIsNone(accuracy.moe_model_file(row, tmp))


def gpipe_row(k, m, value, gpu="NVIDIA V100-PCIe-16GB (one host, no NVLink)"):
    """A row of a normalized-throughput table as published_dev.json writes GPipe's (Huang et al. 2019, Table 2:
    K partitions, M micro-batches, throughput normalized to one row of the table)."""
    return {"id": "gpipe_k%d_m%d" % (k, m), "kind": "normalized_throughput", "source": "GPipe Table 3",
            "model": {"name": "Transformer-48", "layers": 48, "hidden": 2048, "heads": 32, "kv_heads": 32,
                      "ffn_hidden": 8192, "vocab": 32000, "seq_len": 1024},
            "hardware": {"gpu": gpu, "gpus": k, "gpus_per_node": 8, "intra_node": "PCIe", "inter_node": None},
            "layout": {"tp": 1, "pp": k, "dp": 1, "cp": 1, "vp": None, "zero_stage": None, "micro_batch": None,
                       "global_batch": None, "recompute": "re-materialization (per partition)",
                       "schedule": "GPipe (all-F then all-B, flush)", "num_microbatches": m},
            "measured": {"normalized_throughput": value}}


class NormalizedThroughput(unittest.TestCase):
    """T1: 'normalized throughput (ratio of predicted tokens/s to the anchor row of the same table whose measured
    value is 1; the anchor itself is not scored)'."""

    def setUp(self):
        # A stand-in for `trainplan simulate --json`: GPipe's own closed form, throughput proportional to
        # K x M / (M + K - 1) (K stages each busy M of the M + K - 1 slots; Huang et al. 2019, Sec. 2.3's bubble
        # O((K - 1) / (M + K - 1))), read off the flags the rules wrote.
        self.calls = []

        def fake_run(trainplan, args):
            self.calls.append(args)
            k = int(args[args.index("--pp") + 1])
            m = int(args[args.index("--gbs") + 1]) // int(args[args.index("--mbs") + 1])
            return {"valid": True, "tokens_per_s": 1000.0 * k * m / (m + k - 1)}
        self.saved = accuracy.run
        accuracy.run = fake_run

    def tearDown(self):
        accuracy.run = self.saved

    def test_ratio_to_the_anchor(self):
        rows = [gpipe_row(2, 32, 1.0), gpipe_row(4, 32, 1.8), gpipe_row(8, 32, 3.3)]
        with tempfile.TemporaryDirectory() as tmp:
            scored, skipped = accuracy.normalized_rows(FAKE_CLI, rows, tmp)
        self.assertEqual(skipped, [])
        self.assertEqual([r["id"] for r, *_ in scored], ["gpipe_k4_m32", "gpipe_k8_m32"])  # not the anchor
        # (4 x 32 / 35) / (2 x 32 / 33) = 1.8857; (8 x 32 / 39) / (2 x 32 / 33) = 3.3846.
        self.assertAlmostEqual(scored[0][3], 4 * 32 / 35 / (2 * 32 / 33), places=9)
        self.assertAlmostEqual(scored[1][3], 8 * 32 / 39 / (2 * 32 / 33), places=9)
        self.assertEqual(scored[0][2], 1.8)
        # The rules' flags: L4 micro_batch (null -> 1) x num_microbatches; L5 re-materialization -> full; L7 GPipe;
        # L9 a V100 has no bf16 tensor cores -> fp32.
        flags = " ".join(self.calls[1])
        for part in ("--gbs 32", "--mbs 1", "--recompute full", "--schedule gpipe", "--precision fp32", "--pp 4"):
            self.assertIn(part, flags)

    def test_rows_without_an_anchor_or_a_cluster_are_named_with_the_reason(self):
        with tempfile.TemporaryDirectory() as tmp:
            scored, skipped = accuracy.normalized_rows(FAKE_CLI, [gpipe_row(4, 32, 1.8)], tmp)
            self.assertEqual(scored, [])
            self.assertIn("no anchor row", skipped[0])
            tpu = [gpipe_row(k, 4, v, gpu="Cloud TPUv3 (16GB per core)") for k, v in ((2, 1.0), (4, 3.2))]
            scored, skipped = accuracy.normalized_rows(FAKE_CLI, tpu, tmp)
            self.assertEqual(scored, [])
            self.assertEqual(skipped, ["gpipe_k4_m4 (TPU: not expressible (ACCURACY.md cluster rule))"])


class OlderGpus(unittest.TestCase):
    def test_l9_fp32_without_bf16_tensor_cores(self):
        # L9: '"fp16" -> fp16; GPUs without bf16 tensor cores -> fp32; otherwise bf16'.  bf16 tensor cores came
        # with Ampere (A100 whitepaper); V100 (Volta) and P100 (Pascal) have none.
        p = accuracy.precision_flags
        self.assertEqual(p({}, FAKE_CLI, "Tesla V100-PCIe-32GB"), ["--precision", "fp32"])
        self.assertEqual(p({}, FAKE_CLI, "NVIDIA P100"), ["--precision", "fp32"])
        self.assertEqual(p({"precision": "fp16 mixed"}, FAKE_CLI, "V100"), ["--precision", "fp16"])
        self.assertEqual(p({}, FAKE_CLI, "A100-SXM4-80GB"), ["--precision", "bf16"])
        self.assertEqual(p({}, FAKE_CLI, "H100 (SXM, 80GB)"), ["--precision", "bf16"])

    def test_v100_without_nvlink_is_the_pcie_server(self):
        def c(gpu, intra=""):
            return accuracy.cluster_for({"hardware": {"gpu": gpu, "intra_node": intra}})
        self.assertEqual(c("NVIDIA V100-PCIe-16GB (one host, no NVLink)"), "v100-pcie")
        self.assertEqual(c("Tesla V100", "PCIe Gen3"), "v100-pcie")
        self.assertIsNone(c("V100-SXM2-32GB (DGX-1)"))  # NVLink hybrid cube mesh: no such built-in cluster
        self.assertIsNone(c("V100", "NVLink 2.0"))

    def test_one_host_with_more_gpus_than_the_built_in_box(self):
        # The row states 8 GPUs in one host; the built-in PCIe server has 4 and no network: only that figure and
        # the stated 16 GB memory change (32768 MiB x 16 / 32).
        row = gpipe_row(8, 32, 3.3)
        with tempfile.TemporaryDirectory() as tmp:
            with open(accuracy.derived_cluster(row, "v100-pcie", tmp)) as f:
                derived = json.load(f)
        with open(os.path.join(ROOT, "topologies", "v100-pcie.json")) as f:
            built = json.load(f)
        self.assertEqual(derived["gpus_per_node"], 8)
        self.assertEqual(derived["gpu"]["memory"], "16384MiB")
        self.assertEqual(derived["intra_node"], built["intra_node"])
        self.assertEqual({k for k in built["gpu"] if built["gpu"][k] != derived["gpu"][k]}, {"memory"})


REFERENCE = os.path.join(ROOT, "..", "shared", "reference")


def field_paths(doc, prefix=()):
    for key, value in doc.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from field_paths(value, prefix + (key,))


class HostileRows(unittest.TestCase):
    """A held-back row whose fields are not as the rules read them (missing, null, of another type) must be listed
    as not expressible with the reason, never stop the report: every dev row, each of its fields in turn deleted,
    nulled or made a string or zero, raises nothing the report does not catch (accuracy.ROW_ERRORS)."""

    def check(self, name, mapping):
        path = os.path.join(REFERENCE, name)
        if not os.path.exists(path):
            self.skipTest(path + " not here")
        with open(path) as f:
            rows = json.load(f)
        tried = 0
        with tempfile.TemporaryDirectory() as tmp:
            for original in rows:
                for fields in list(field_paths(original)):
                    for value in ("(deleted)", None, "x", 0):
                        row = json.loads(json.dumps(original))
                        holder = row
                        for key in fields[:-1]:
                            holder = holder[key]
                        if value == "(deleted)":
                            del holder[fields[-1]]
                        else:
                            holder[fields[-1]] = value
                        tried += 1
                        try:
                            mapping(row, tmp)
                        except accuracy.ROW_ERRORS:
                            pass
                        except Exception as e:  # noqa: BLE001: what the report would not catch
                            self.fail("%s with %s = %r: %s: %s" % (original["id"], ".".join(fields), value,
                                                                  type(e).__name__, e))
        self.assertGreater(tried, 1000)

    def test_dense_rows(self):
        def mapping(row, tmp):
            if accuracy.cluster_for(row):
                accuracy.flags_for(row, FAKE_CLI)
            accuracy.normalized_table_key(row)
        self.check("published_dev.json", mapping)

    def test_moe_rows(self):
        def mapping(row, tmp):
            if accuracy.moe_cluster_for(row, tmp) and accuracy.moe_flags_for(row, FAKE_CLI):
                accuracy.moe_model_file(row, tmp)
        self.check("published_moe_dev.json", mapping)


class MoeOverlapOffload(unittest.TestCase):
    def test_m6_flags(self):
        f = accuracy.moe_overlap_offload_flags
        self.assertEqual(f({"ep_a2a_overlap": True}, FAKE_CLI), ["--ep-overlap"])
        self.assertEqual(f({"optimizer_offload": True}, FAKE_CLI), ["--offload", "optimizer"])
        self.assertEqual(f({"ep_a2a_overlap": False, "optimizer_offload": False}, FAKE_CLI), [])
        self.assertEqual(f({"ep_a2a_overlap": None}, FAKE_CLI), [])
        accuracy._HELP["no-overlap"] = "--ep --etp"
        self.assertEqual(f({"ep_a2a_overlap": True, "optimizer_offload": True}, "no-overlap"), [])

    def test_report_row_keeps_its_flags(self):
        row = json.loads(json.dumps(DSV3_REPORT))
        row["layout"].update(ep_a2a_overlap=True, optimizer_offload=False)
        flags = accuracy.moe_flags_for(row, FAKE_CLI)[0]
        self.assertIn("--ep-overlap", flags)
        self.assertNotIn("--offload", flags)


if __name__ == "__main__":
    unittest.main()

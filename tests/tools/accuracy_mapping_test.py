"""The ACCURACY.md cluster rule as tools/accuracy.py applies it: a row's stated hardware figures change the
nearest built-in cluster, and nothing else does.  Oracles: the sources' own figures, quoted per check."""
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


if __name__ == "__main__":
    unittest.main()

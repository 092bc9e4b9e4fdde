"""The candidates' summary: worst seeds per cell, the counts per mode, and the
SM-capacity bound from each pair's alone row."""

import importlib.util
import unittest
from pathlib import Path

SPEC = importlib.util.spec_from_file_location(
    "sim_candidates", Path(__file__).with_name("sim_candidates.py"))
sc = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(sc)


def row(inf, mode, p99=None, kept=None, bound=None):
    return {"set": "h100", "inference": inf, "training": "t", "mode": mode,
            "p99_ratio_max": p99, "train_fraction_min": kept, "kept_at_most": bound}


class Summary(unittest.TestCase):
    def summary(self):
        return sc.summarise([
            row("a", "alone", 1.0, 1.0, bound=1.20),
            row("a", "mps_lowprio", 1.20, 0.90),
            row("a", "tandem_spatial", 1.05, 0.91),
            row("b", "alone", 1.0, 1.0, bound=0.86),
            row("b", "mps_lowprio", 1.70, 0.74),
            row("b", "tandem_spatial", 1.60, 0.70),
        ])

    def test_each_pair_shows_its_capacity_bound(self):
        s = self.summary()
        self.assertIn("| h100 a : t | 1.20 / 0.90 | 1.05 / 0.91 | 1.20 |", s)
        self.assertIn("| h100 b : t | 1.70 / 0.74 | 1.60 / 0.70 | 0.86 |", s)
        self.assertIn("within reach on 1 of 2 pairs", s)

    def test_the_counts_take_the_worst_seed(self):
        s = self.summary()
        self.assertIn("| mps_lowprio | 0 of 2 | - | - |", s)
        # Spatial meets the goal on a, and has the lower p99 on both, with at
        # least MPS + priority's training only on a.
        self.assertIn("| tandem_spatial | 1 of 2 | 2 | 1 |", s)

    def test_a_matrix_without_alone_rows_shows_no_bound(self):
        s = sc.summarise([row("a", "mps_lowprio", 1.2, 0.9)])
        self.assertIn("| h100 a : t | 1.20 / 0.90 | - |", s)
        self.assertIn("within reach on 0 of 1 pairs", s)


if __name__ == "__main__":
    unittest.main()

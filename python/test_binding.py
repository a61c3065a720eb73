"""Tests of the ctypes binding's foundation: version, statuses, config."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deltacast as dc  # noqa: E402


class Foundation(unittest.TestCase):
    def test_version_matches_library(self):
        self.assertRegex(dc.version(), r"^\d+\.\d+\.\d+$")

    def test_features(self):
        f = dc.build_features()
        for k in ("verbs", "ucx", "cuda", "tls", "hwloc", "isal"):
            self.assertIn(k, f)

    def test_status_names(self):
        self.assertEqual(dc.status_name(0), "DC_OK")
        self.assertEqual(dc.status_name(-2), "DC_ERR_CORRUPT")
        self.assertTrue(dc.is_retryable(-2))
        self.assertFalse(dc.is_retryable(-100))

    def test_parse_size_and_errors(self):
        self.assertEqual(dc.parse_size("4MiB"), 4 << 20)
        with self.assertRaises(dc.DeltacastError) as cm:
            dc.parse_size("four megs")
        self.assertEqual(cm.exception.name, "DC_ERR_INVALID")
        self.assertIn("four megs", cm.exception.detail)

    def test_parse_rate(self):
        self.assertAlmostEqual(dc.parse_rate("100mbit"), 1e8)

    def test_config(self):
        names = [r[0] for r in dc.config_table()]
        self.assertIn("chunk_size", names)
        dc.config_set("chunk_size", "1MiB")
        self.assertEqual(dc.config_get("chunk_size"), "1MiB")
        dc.config_set("chunk_size", None)
        with self.assertRaises(dc.DeltacastError):
            dc.config_set("nope", "1")
        with self.assertRaises(KeyError):
            dc.config_get("nope")


if __name__ == "__main__":
    unittest.main()

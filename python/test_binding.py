"""Tests of the ctypes binding's foundation: version, statuses, config."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deltacast as dc  # noqa: E402


class Foundation(unittest.TestCase):
    def test_version_matches_library(self):
        self.assertRegex(dc.version(), r"^\d+\.\d+\.\d+$")
        self.assertEqual(dc.version(), dc.__version__)
        self.assertEqual(dc.__version__, "0.2.1")

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

    def test_config_is_typed(self):
        rows = {r[0]: r for r in dc.config_table()}
        for key in ("engine_crash_at", "engine_root_crash", "engine_trace", "wan_fifo",
                    "kern_isa", "rdma_device", "fault", "log"):
            self.assertIn(key, rows)
        self.assertEqual(rows["transport"][3], "enum")
        self.assertEqual(rows["transport"][4], "auto|rdma|ucx|tcp")
        self.assertTrue(all(r[5] for r in rows.values()))
        self.assertEqual(dc.config_get_typed("chunk_size"), 4 << 20)
        dc.config_set("wan_fifo", "on")
        self.assertIs(dc.config_get_typed("wan_fifo"), True)
        dc.config_set("timeout_ms", "soon")
        with self.assertRaises(dc.DeltacastError) as cm:
            dc.config_get_typed("timeout_ms")
        self.assertEqual(cm.exception.name, "DC_ERR_INVALID")
        self.assertIn("timeout_ms", cm.exception.detail)
        self.assertIn("soon", cm.exception.detail)
        dc.config_set("timeout_ms", None)
        dc.config_set("wan_fifo", None)

    def test_node_transport_is_checked(self):
        topo = dc.Topology.local(1, 1, 7300)
        try:
            with self.assertRaises(dc.DeltacastError) as cm:
                dc.run_node(topo, 1, "/nonexistent", weights_path="/nonexistent",
                            transport="carrier-pigeon")
            self.assertIn("carrier-pigeon", cm.exception.detail)
        finally:
            topo.close()


if __name__ == "__main__":
    unittest.main()

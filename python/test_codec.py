"""The binding's codec calls: diff/apply of files and of in-memory images,
byte-compared; bad input raises with the library's message."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deltacast as dc  # noqa: E402

BIN = os.environ.get("DELTACAST_BIN")


@unittest.skipUnless(BIN, "DELTACAST_BIN not set (run through meson test)")
class Codec(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="dc-py-")
        d = cls.tmp.name
        subprocess.run([BIN, "gen", "--params", "300000", "--change-rate", "0.02",
                        "--seed", "7", "-o", d], check=True, capture_output=True)
        cls.base = os.path.join(d, "base.safetensors")
        cls.next = os.path.join(d, "next.safetensors")
        with open(cls.base, "rb") as f:
            cls.base_bytes = f.read()
        with open(cls.next, "rb") as f:
            cls.next_bytes = f.read()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_files_round_trip_exact(self):
        delta = os.path.join(self.tmp.name, "x.delta")
        out = os.path.join(self.tmp.name, "out.safetensors")
        st = dc.diff_files(self.base, self.next, delta, chunk_size=65536)
        self.assertGreater(st["changed"], 0)
        self.assertLess(st["delta_bytes"], len(self.next_bytes) // 10)
        dc.apply_files(self.base, delta, out)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), self.next_bytes)

    def test_bytes_round_trip_exact(self):
        delta = dc.diff_bytes(self.base_bytes, self.next_bytes, chunk_size=1 << 20)
        self.assertEqual(dc.apply_bytes(self.base_bytes, delta), self.next_bytes)
        self.assertEqual(len(dc.checkpoint_digest(self.next_bytes)), 16)
        self.assertNotEqual(dc.checkpoint_digest(self.base_bytes),
                            dc.checkpoint_digest(self.next_bytes))

    def test_layouts_round_trip_exact(self):
        for layout in ("simd", "compact"):
            delta = dc.diff_bytes(self.base_bytes, self.next_bytes, layout=layout)
            self.assertEqual(dc.apply_bytes(self.base_bytes, delta), self.next_bytes)
        with self.assertRaises(ValueError):
            dc.diff_bytes(self.base_bytes, self.next_bytes, layout="fast")

    def test_wrong_base_is_refused(self):
        delta = dc.diff_bytes(self.base_bytes, self.next_bytes)
        with self.assertRaises(dc.DeltacastError) as cm:
            dc.apply_bytes(self.next_bytes, delta)
        self.assertEqual(cm.exception.name, "DC_ERR_WRONG_BASE")

    def test_corrupt_delta_is_refused(self):
        delta = bytearray(dc.diff_bytes(self.base_bytes, self.next_bytes))
        delta[len(delta) // 2] ^= 0x40
        with self.assertRaises(dc.DeltacastError) as cm:
            dc.apply_bytes(self.base_bytes, bytes(delta))
        self.assertIn(cm.exception.name, ("DC_ERR_FORMAT", "DC_ERR_CORRUPT", "DC_ERR_VERIFY"))
        with self.assertRaises(dc.DeltacastError):
            dc.apply_bytes(self.base_bytes, b"not a delta at all")


if __name__ == "__main__":
    unittest.main()

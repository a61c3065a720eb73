"""The receiver handle (dc.Receiver): a rollout worker's weights in its own
buffers, refitted by a trainer's dc.Sender in the same process over real
sockets: events in order, hold (the weights stay byte-for-byte while the
trainer's push waits) and release, callbacks, the cold start."""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deltacast as dc  # noqa: E402
from test_refit import free_port_block, read_safetensors  # noqa: E402

BIN = os.environ.get("DELTACAST_BIN")


@unittest.skipUnless(BIN, "DELTACAST_BIN not set (run through meson test)")
class ReceiverHandle(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="dc-py-recv-")
        ver = os.path.join(self.tmp, "ver")
        subprocess.run([BIN, "gen", "--params", "200000", "--change-rate", "0.01",
                        "--seed", "7", "-o", ver], check=True, capture_output=True)
        v0 = read_safetensors(os.path.join(ver, "base.safetensors"))
        v1 = read_safetensors(os.path.join(ver, "next.safetensors"))
        # v2: v1 with the first byte of every tensor flipped
        v2 = [(n, d, k, bytes([data[0] ^ 0x40]) + data[1:] if data else data)
              for n, d, k, data in v1]
        self.versions = [{n: data for n, _, _, data in v} for v in (v0, v1, v2)]
        self.tensors = [(n, d, k) for n, d, k, _ in v0]
        self.names = [n for n, _, _, data in v0 if data]
        self.trainer = {n: bytearray(self.versions[0][n]) for n in self.names}
        os.environ.update(DELTACAST_SECRET="py-recv-secret", DELTACAST_TRANSPORT="tcp",
                          DELTACAST_TIMEOUT_MS="1000")
        self.port = free_port_block(2)
        self.topo = dc.Topology.local(1, 1, self.port)

    def tearDown(self):
        self.topo.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def sender(self):
        return dc.Sender(self.topo, os.path.join(self.tmp, "st0"), self.tensors,
                         [(n, 0, self.trainer[n]) for n in self.names],
                         chunk_size=64 * 1024, wait_ms=20000, abort_ms=1500)

    def train(self, v):
        for n in self.names:
            self.trainer[n][:] = self.versions[v][n]  # the optimizer step, in place

    def exact(self, bufs, v):
        return all(bytes(bufs[n]) == self.versions[v][n] for n in self.names)

    def next_event(self, rx, kind, version):
        ev = rx.wait(20)
        self.assertIsNotNone(ev, f"no {kind} event for v{version}")
        self.assertEqual((ev["type"], ev["version"]), (kind, version), ev)
        return ev

    def test_events_hold_and_release(self):
        bufs = {n: bytearray(self.versions[0][n]) for n in self.names}
        snd = self.sender()
        with dc.Receiver(self.topo, os.path.join(self.tmp, "st1"), self.tensors,
                         [(n, 0, bufs[n]) for n in self.names], rank=1,
                         chunk_size=64 * 1024) as rx:
            self.assertEqual(rx.version()[0], 0)
            self.train(1)
            self.assertEqual(snd.push()["version"], 1)
            ev = self.next_event(rx, "begin", 1)
            self.assertEqual(ev["baseline"], 0)
            ev = self.next_event(rx, "committed", 1)
            self.assertTrue(self.exact(bufs, 1), "not byte-exact with v1")
            digest = dc.refit_committed(os.path.join(self.tmp, "st0"))[2]
            self.assertEqual(ev["digest"], digest)
            self.assertEqual(rx.version(), (1, digest, None))

            rx.hold()
            self.train(2)
            result = {}
            th = threading.Thread(target=lambda: result.update(stats=snd.push()))
            th.start()
            ev = self.next_event(rx, "begin", 2)
            self.assertIn("held", ev["flags"])
            deadline = time.time() + 2.5  # past the root's abort_ms: alive, not silent
            while time.time() < deadline:
                self.assertTrue(th.is_alive(), "push returned while the receiver held v2")
                self.assertTrue(self.exact(bufs, 1), "weights written while held")
                time.sleep(0.1)
            st = rx.stats()
            self.assertTrue(st["held"])
            self.assertGreater(st["staged_bytes"], 0)
            self.assertEqual(rx.version()[2], 2)
            rx.release()
            self.assertTrue(self.exact(bufs, 2), "release did not apply v2 exactly")
            th.join(30)
            self.assertFalse(th.is_alive())
            self.assertEqual(result["stats"]["version"], 2)
            self.next_event(rx, "committed", 2)
            snd.close()
            ev = self.next_event(rx, "ended", 2)
            self.assertEqual(ev["status"], 0, ev["message"])
            st = rx.stats()
            self.assertEqual((st["versions_committed"], st["staged_bytes"]), (2, 0))
            self.assertGreater(st["bytes_received"], 0)

    def test_on_event_and_cold_start(self):
        bufs = {n: bytearray(len(self.versions[0][n])) for n in self.names}  # holds nothing
        events = []
        got, ended = threading.Event(), threading.Event()

        def on_event(ev):
            events.append(ev)
            if ev["type"] == "committed":
                got.set()
            if ev["type"] == "ended":
                ended.set()
        with self.sender() as snd, dc.Receiver(
                self.topo, os.path.join(self.tmp, "st1"), self.tensors,
                [(n, 0, bufs[n]) for n in self.names], rank=1, initial_version=None,
                chunk_size=64 * 1024) as rx:
            self.assertEqual(rx.version(), (None, None, None))
            rx.on_event(on_event)
            self.train(1)
            snd.push()
            self.assertTrue(got.wait(20), events)
            self.assertEqual([(e["type"], e["version"]) for e in events],
                             [("begin", 1), ("committed", 1)])
            self.assertLessEqual({"cold", "dense"}, events[0]["flags"])
            self.assertIn("cold start: dense", events[0]["message"])
            self.assertTrue(self.exact(bufs, 1), "cold receiver not byte-exact with v1")
            self.assertEqual(rx.version()[0], 1)
            self.assertGreater(rx.stats()["repairs"], 0)
            snd.close()  # BYE: the job ends, the receiver's close has nothing to cancel
            self.assertTrue(ended.wait(20), events)
            self.assertEqual(events[-1]["status"], 0, events[-1])
            self.assertTrue(rx.close())


if __name__ == "__main__":
    unittest.main()

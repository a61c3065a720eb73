"""Embedding the engine: a rollout worker written in Python refits tensors
held in its own (numpy-like, writable) buffers through a placement map,
from a trainer running `deltacast node`; bytes compared with the target."""
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deltacast as dc  # noqa: E402

BIN = os.environ.get("DELTACAST_BIN")


def free_port_block(n):
    """n consecutive free ports below the kernel's ephemeral range (so that no
    outgoing connection of a concurrent test takes one as its source port
    between this check and the node's bind)."""
    import random
    lo = 20000
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            eph = int(f.read().split()[0])
    except (OSError, ValueError):
        eph = 32768
    for _ in range(200):
        base = random.randrange(lo, max(lo + 1, eph - n))
        socks = []
        try:
            for i in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no port")


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    data = raw[8 + hlen:]
    header.pop("__metadata__", None)
    out = []
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = t["data_offsets"]
        n = 1
        for d in t["shape"]:
            n *= d
        out.append((name, t["dtype"], n, data[b:e]))
    return out


@unittest.skipUnless(BIN, "DELTACAST_BIN not set (run through meson test)")
class Refit(unittest.TestCase):
    def test_memory_receiver_through_placement_map(self):
        tmp = tempfile.mkdtemp(prefix="dc-py-refit-")
        try:
            ver = os.path.join(tmp, "ver")
            subprocess.run([BIN, "gen", "--params", "200000", "--change-rate", "0.01",
                            "--seed", "3", "-o", ver], check=True, capture_output=True)
            os.rename(os.path.join(ver, "base.safetensors"), os.path.join(ver, "v0.safetensors"))
            os.rename(os.path.join(ver, "next.safetensors"), os.path.join(ver, "v1.safetensors"))
            v0 = read_safetensors(os.path.join(ver, "v0.safetensors"))
            v1 = read_safetensors(os.path.join(ver, "v1.safetensors"))
            # each tensor split over two buffers: a placement map of 2 segments
            tensors, segments = [], []
            for name, dtype, n, data in v0:
                tensors.append((name, dtype, n))
                cut = len(data) // 3
                for off, part in ((0, data[:cut]), (cut, data[cut:])):
                    if part:
                        segments.append((name, off, bytearray(part)))
            want = {name: data for name, _, _, data in v1}
            stale = sum(bytes(buf) != want[name][off:off + len(buf)] for name, off, buf in segments)
            self.assertGreater(stale, 0, "v0 and v1 must differ for the test to mean anything")
            port = free_port_block(4)
            env = dict(os.environ, DELTACAST_SECRET="py-secret", DELTACAST_TRANSPORT="tcp",
                       DELTACAST_TIMEOUT_MS="2000")
            root = subprocess.Popen(
                [BIN, "node", "--local", f"1:1:{port}", "--rank", "0", "--versions", ver,
                 "--state", os.path.join(tmp, "st0"), "--chunk-size", "64KiB"],
                env=env, stdout=subprocess.DEVNULL,  # its per-version lines: not TAP
                stderr=subprocess.PIPE)
            os.environ.update(DELTACAST_SECRET="py-secret", DELTACAST_TRANSPORT="tcp",
                              DELTACAST_TIMEOUT_MS="2000")
            topo = dc.Topology.local(1, 1, port)
            self.assertEqual(topo.nodes, 2)
            # the node's transport is its config field (this process's key
            # names none)
            dc.config_set("transport", "bogus")
            try:
                dc.run_node(topo, 1, os.path.join(tmp, "st1"), tensors=tensors,
                            segments=segments, chunk_size=64 * 1024, transport="tcp")
            finally:
                dc.config_set("transport", None)
                _, err = root.communicate(timeout=60)
            self.assertEqual(root.returncode, 0, err.decode(errors="replace"))
            for name, off, buf in segments:
                self.assertEqual(bytes(buf), want[name][off:off + len(buf)], name)
            version, baseline, _ = dc.refit_committed(os.path.join(tmp, "st0"))
            self.assertEqual((version, baseline), (1, 0))
            topo.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_memory_sender_pushes_versions(self):
        """A Python trainer sends from its own buffers (dc.Sender); two
        `deltacast node` receivers in two regions; two versions pushed from
        the same buffers updated in place; receivers byte-compared."""
        tmp = tempfile.mkdtemp(prefix="dc-py-send-")
        try:
            ver = os.path.join(tmp, "ver")
            subprocess.run([BIN, "gen", "--params", "200000", "--change-rate", "0.01",
                            "--seed", "5", "-o", ver], check=True, capture_output=True)
            v0p, v1p = os.path.join(ver, "base.safetensors"), os.path.join(ver, "next.safetensors")
            v2p = os.path.join(ver, "v2.safetensors")
            # v2: v1 with one element of every tensor changed
            raw = bytearray(open(v1p, "rb").read())
            (hlen,) = struct.unpack("<Q", raw[:8])
            header = json.loads(raw[8:8 + hlen])
            header.pop("__metadata__", None)
            for t in header.values():
                b, e = t["data_offsets"]
                if e > b:
                    raw[8 + hlen + b] ^= 0x40
            open(v2p, "wb").write(raw)
            versions = [read_safetensors(p) for p in (v0p, v1p, v2p)]
            tensors = [(name, dtype, n) for name, dtype, n, _ in versions[0]]
            bufs = {name: bytearray(data) for name, _, _, data in versions[0]}
            segments = [(name, 0, bufs[name]) for name, _, _, _ in versions[0] if bufs[name]]
            port = free_port_block(3)
            env = dict(os.environ, DELTACAST_SECRET="py-secret", DELTACAST_TRANSPORT="tcp",
                       DELTACAST_TIMEOUT_MS="2000")
            os.environ.update(DELTACAST_SECRET="py-secret", DELTACAST_TRANSPORT="tcp",
                              DELTACAST_TIMEOUT_MS="2000")
            topo = dc.Topology.local(2, 1, port)
            rx = []
            for r in (1, 2):
                w = os.path.join(tmp, f"w{r}.st")
                shutil.copy(v0p, w)
                rx.append((w, subprocess.Popen(
                    [BIN, "node", "--local", f"2:1:{port}", "--rank", str(r), "--weights", w,
                     "--state", os.path.join(tmp, f"st{r}"), "--chunk-size", "64KiB"],
                    env=env, stderr=subprocess.PIPE)))
            try:
                with dc.Sender(topo, os.path.join(tmp, "st0"), tensors, segments,
                               chunk_size=64 * 1024, wait_ms=30000) as snd:
                    for v in (1, 2):
                        for name, _, _, data in versions[v]:
                            bufs[name][:] = data  # the optimizer step, in place
                        stats = snd.push()
                        self.assertEqual(stats["version"], v)
                        self.assertEqual(stats["repair_bytes"], 0)
                        self.assertGreater(stats["payload_bytes"], 0)
                        self.assertLess(stats["payload_bytes"], stats["dense_bytes"])
                        want = open((v0p, v1p, v2p)[v], "rb").read()
                        for w, _ in rx:
                            self.assertEqual(open(w, "rb").read(), want, f"{w} after v{v}")
                    with self.assertRaises(dc.DeltacastError):
                        snd.push(segments[:-1])  # a tensor left uncovered
            finally:
                for _, p in rx:
                    _, err = p.communicate(timeout=60)
                    self.assertEqual(p.returncode, 0, err.decode(errors="replace"))
            self.assertEqual(dc.refit_committed(os.path.join(tmp, "st0"))[:2], (2, 1))
            topo.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_cuda_memory_without_gpu_is_refused(self):
        """memory="cuda" on a machine without a usable GPU: a clear error,
        not a CPU read of device addresses."""
        if dc.build_features().get("cuda") and os.path.exists("/dev/nvidia0"):
            self.skipTest("a GPU is present: perf/gpu-check.sh runs the device-memory refit")
        topo = dc.Topology.local(1, 1, free_port_block(2))
        buf = bytearray(64)
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(dc.DeltacastError) as e:
                dc.Sender(topo, tmp, [("w", "BF16", 32)], [("w", 0, buf)], memory="cuda")
            self.assertIn("CUDA", str(e.exception))
        topo.close()

    def test_sender_ranges_split_the_checkpoint(self):
        """Two trainer shards: their ranges are disjoint and cover every byte."""
        with tempfile.TemporaryDirectory() as tmp:
            topo_path = os.path.join(tmp, "t.yaml")
            with open(topo_path, "w") as f:
                f.write("shards: 2\nregions:\n  - name: train\n    nodes:\n"
                        "      - {host: s0, addr: \"127.0.0.1:7000\", role: sender, shards: [0]}\n"
                        "      - {host: s1, addr: \"127.0.0.1:7001\", role: sender, shards: [1]}\n"
                        "  - name: r0\n    nodes:\n"
                        "      - {host: r0, addr: \"127.0.0.1:7002\", role: receiver}\n")
            topo = dc.Topology.load(topo_path)
            tensors = [("a", "BF16", 100000), ("b", "F32", 7), ("c", "BF16", 250001)]
            sizes = {"a": 200000, "b": 28, "c": 500002}
            got = {name: [] for name in sizes}
            for rank in (0, 1):
                ranges = dc.sender_ranges(topo, rank, tensors, chunk_size=65536)
                self.assertGreater(len(ranges), 0)
                for name, off, length in ranges:
                    got[name].append((off, off + length, rank))
            for name, size in sizes.items():
                spans = sorted(got[name])
                at = 0
                for b, e, _ in spans:
                    self.assertEqual(b, at, f"{name}: gap or overlap at {at}")
                    at = e
                self.assertEqual(at, size, name)
            self.assertEqual({r for v in got.values() for *_, r in v}, {0, 1})
            topo.close()


    def test_secret_file_keyword(self):
        """Sender(secret_file=...) authenticates with that file's secret,
        not the DELTACAST_SECRET of the environment: a receiver given the
        file through DELTACAST_SECRET_FILE takes the version.  The sender's
        state directory is created with its parents."""
        with self.assertRaises(ValueError):
            dc.Sender(None, "st", [], [], secret="a", secret_file="b")
        tmp = tempfile.mkdtemp(prefix="dc-py-secret-")
        saved = {k: os.environ.get(k) for k in ("DELTACAST_SECRET", "DELTACAST_SECRET_FILE")}
        try:
            ver = os.path.join(tmp, "ver")
            subprocess.run([BIN, "gen", "--params", "20000", "--change-rate", "0.01",
                            "-o", ver], check=True, capture_output=True)
            v0p, v1p = os.path.join(ver, "base.safetensors"), os.path.join(ver, "next.safetensors")
            v0, v1 = read_safetensors(v0p), read_safetensors(v1p)
            tensors = [(name, dtype, n) for name, dtype, n, _ in v0]
            bufs = {name: bytearray(data) for name, _, _, data in v0}
            segments = [(name, 0, bufs[name]) for name, _, _, _ in v0 if bufs[name]]
            secret = os.path.join(tmp, "job.secret")
            with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write("the-file-secret\n")
            port = free_port_block(2)
            w = os.path.join(tmp, "w1.st")
            shutil.copy(v0p, w)
            env = dict(os.environ, DELTACAST_SECRET_FILE=secret, DELTACAST_TRANSPORT="tcp",
                       DELTACAST_TIMEOUT_MS="2000")
            env.pop("DELTACAST_SECRET", None)
            os.environ.pop("DELTACAST_SECRET_FILE", None)
            os.environ.update(DELTACAST_SECRET="not-the-job-secret", DELTACAST_TRANSPORT="tcp",
                              DELTACAST_TIMEOUT_MS="2000")
            rx = subprocess.Popen([BIN, "node", "--local", f"1:1:{port}", "--rank", "1",
                                   "--weights", w, "--state", os.path.join(tmp, "st1")],
                                  env=env, stderr=subprocess.PIPE)
            topo = dc.Topology.local(1, 1, port)
            try:
                # the state directory is made with its parents
                with dc.Sender(topo, os.path.join(tmp, "deep", "a", "st0"), tensors, segments,
                               wait_ms=30000, secret_file=secret) as snd:
                    self.assertEqual(dc.config_get("secret_file"), secret)
                    for name, _, _, data in v1:
                        bufs[name][:] = data
                    self.assertEqual(snd.push()["version"], 1)
            finally:
                _, err = rx.communicate(timeout=60)
                self.assertEqual(rx.returncode, 0, err.decode(errors="replace"))
            with open(w, "rb") as got, open(v1p, "rb") as want:
                self.assertEqual(got.read(), want.read())
            self.assertEqual(dc.refit_committed(os.path.join(tmp, "deep", "a", "st0"))[0], 1)
            topo.close()
        finally:
            dc.config_set("secret_file", None)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()

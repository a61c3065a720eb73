"""Torch- and numpy-native helpers: dtype mapping (every dtype, exact bits
through diff/apply and through a refit to a `deltacast node` receiver, NaN
payloads and -0.0 included), contiguity, device and dtype errors naming the
tensor, layouts and their mismatch message, diff/apply on named tensors and
on raw buffers, Sender/Receiver.from_state_dict.

Needs torch and numpy (Debian: python3-torch, python3-numpy; meson runs this
file with /usr/bin/python3).  Without them the tests skip saying so, except
under CI=true, where a missing torch is a failure (CI installs it)."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deltacast as dc  # noqa: E402
from test_refit import free_port_block  # noqa: E402

try:
    import numpy as np
    import torch
    MISSING = None
except ImportError as e:  # pragma: no cover - depends on the machine
    np = torch = None
    MISSING = f"{sys.executable} cannot import torch/numpy ({e}): apt-get install " \
              "python3-torch python3-numpy"

BIN = os.environ.get("DELTACAST_BIN")


class Requirements(unittest.TestCase):
    def test_torch_and_numpy_present_in_ci(self):
        """CI installs python3-torch: there these tests must not skip."""
        if MISSING and os.environ.get("CI") == "true":
            self.fail(MISSING)
        if MISSING:
            self.skipTest(MISSING)


# torch dtype name -> safetensors spelling: every dtype the mapping covers
TORCH_DTYPES = [("bfloat16", "BF16"), ("float16", "F16"), ("float32", "F32"),
                ("float64", "F64"), ("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"),
                ("int8", "I8"), ("int16", "I16"), ("int32", "I32"), ("int64", "I64"),
                ("uint8", "U8"), ("bool", "BOOL")]
NUMPY_DTYPES = [("float16", "F16"), ("float32", "F32"), ("float64", "F64"), ("int8", "I8"),
                ("int16", "I16"), ("int32", "I32"), ("int64", "I64"), ("uint8", "U8"),
                ("uint16", "U16"), ("uint32", "U32"), ("uint64", "U64"), ("bool", "BOOL")]
# bit patterns that value comparisons lose: -0.0 and NaNs with payloads
SPECIAL = {2: [0x8000, 0x7c01, 0xfe5a, 0x7fc1, 0xffff],
           4: [0x80000000, 0x7f800001, 0xffc0dead, 0x7fa5a5a5],
           8: [0x8000000000000000, 0x7ff0000000000001, 0xfff8deadbeef0001]}


def torch_dtypes():
    """[(torch dtype, spelling)] this torch has, and the names it lacks."""
    have, lack = [], []
    for name, spelled in TORCH_DTYPES:
        if hasattr(torch, name):
            have.append((getattr(torch, name), spelled))
        else:
            lack.append(name)
    return have, lack


def random_tensor(dtype, n, gen):
    """n elements of random bits (bool: 0/1), plus the special patterns."""
    esize = torch.tensor([], dtype=dtype).element_size()
    if dtype is torch.bool:
        return torch.randint(0, 2, (n,), generator=gen).bool()
    raw = torch.randint(0, 256, (n * esize,), dtype=torch.uint8, generator=gen)
    t = raw.view(dtype).clone()
    if esize in SPECIAL:
        u8 = t.view(torch.uint8)
        for i, b in enumerate(SPECIAL[esize]):
            u8[i * esize:(i + 1) * esize] = torch.tensor(list(b.to_bytes(esize, "little")),
                                                         dtype=torch.uint8)
    return t


def raw(t):
    """A tensor's or array's bytes."""
    if isinstance(t, np.ndarray):
        return t.tobytes()
    return bytes(t.contiguous().view(torch.uint8).numpy()) if t.numel() else b""


def clone(sd):
    return {k: (v.clone() if torch.is_tensor(v) else v.copy()) for k, v in sd.items()}


def changed(sd, seed):
    """A copy of sd with a few elements of every tensor changed (bits)."""
    g = torch.Generator().manual_seed(seed)
    out = clone(sd)
    for k, v in out.items():
        if torch.is_tensor(v) and v.numel():
            u8 = v.view(torch.uint8) if v.dtype is not torch.bool else None
            idx = torch.randint(0, v.numel(), (max(1, v.numel() // 50),), generator=g)
            if u8 is None:
                v[idx] = ~v[idx]
            else:
                u8[idx * v.element_size()] ^= 0x5a
    return out


@unittest.skipIf(MISSING, MISSING or "")
class Dtypes(unittest.TestCase):
    def test_torch_dtype_spelling(self):
        have, lack = torch_dtypes()
        for dtype, spelled in have:
            lay = dc.layout({"t": torch.zeros(3, 2, dtype=dtype)})
            self.assertEqual(lay, [("t", spelled, (3, 2))], str(dtype))
        if lack:
            print(f"# torch {torch.__version__} has no {', '.join(lack)}: their mapping is "
                  "not exercised here", file=sys.stderr)

    def test_float8_round_trip(self):
        have, lack = torch_dtypes()
        if "float8_e4m3fn" in lack:
            self.skipTest(f"torch {torch.__version__} has no float8 dtypes (torch >= 2.1)")
        g = torch.Generator().manual_seed(8)
        for dtype, _ in have:
            if "float8" in str(dtype):
                base = {"f8": random_tensor(dtype, 4096, g)}
                nxt = changed(base, 9)
                tgt = clone(base)
                dc.apply_tensors(tgt, dc.diff_tensors(base, nxt))
                self.assertEqual(raw(tgt["f8"]), raw(nxt["f8"]), str(dtype))

    def test_numpy_dtype_spelling(self):
        for name, spelled in NUMPY_DTYPES:
            self.assertEqual(dc.layout({"a": np.zeros((2, 5), dtype=name)}),
                             [("a", spelled, (2, 5))], name)

    def test_every_dtype_round_trips_exact_bits(self):
        """diff_tensors/apply_tensors over one state dict holding every
        dtype: the applied tensors equal the target bit for bit (NaN
        payloads, -0.0); values the codec could normalise would differ."""
        have, _ = torch_dtypes()
        g = torch.Generator().manual_seed(1)
        base = {f"t.{spelled}": random_tensor(dtype, 3000 + i, g)
                for i, (dtype, spelled) in enumerate(have)}
        base["empty"] = torch.zeros(0, 4)
        for name, spelled in NUMPY_DTYPES:
            a = np.frombuffer(np.random.default_rng(2).bytes(512 * np.dtype(name).itemsize),
                              dtype=name).copy()
            if name == "bool":
                a = (a.view(np.uint8) & 1).astype(bool)
            base[f"np.{name}"] = a.reshape(16, -1)
        base["np.float32"].view(np.uint32)[0, :3] = [0x80000000, 0x7f800123, 0xffc0beef]
        nxt = changed({k: v for k, v in base.items() if torch.is_tensor(v)}, 3)
        for k, v in base.items():
            if isinstance(v, np.ndarray):
                w = v.copy()
                w.view(np.uint8).reshape(-1)[::97] ^= 0x21 if v.dtype != bool else 0
                if v.dtype == bool:
                    w[0] = ~w[0]
                nxt[k] = w
        self.assertTrue(any(raw(base[k]) != raw(nxt[k]) for k in base))
        delta = dc.diff_tensors(base, nxt)
        tgt = clone(base)
        dc.apply_tensors(tgt, delta)
        for k in base:
            self.assertEqual(raw(tgt[k]), raw(nxt[k]), k)
            self.assertEqual(type(tgt[k]), type(base[k]), k)
        # NaN payloads and -0.0 survived as bits
        f32 = tgt["t.F32"].view(torch.int32)
        self.assertEqual(f32[0].item() & 0xffffffff, 0x80000000)
        self.assertEqual(f32[1].item() & 0xffffffff, 0x7f800001)

    def test_unsupported_dtype_names_the_tensor(self):
        with self.assertRaises(ValueError) as e:
            dc.layout({"ok": torch.zeros(2), "rot": torch.zeros(2, dtype=torch.complex64)})
        self.assertIn("'rot'", str(e.exception))
        self.assertIn("complex64", str(e.exception))
        with self.assertRaises(ValueError) as e:
            dc.layout({"np.c": np.zeros(2, dtype=np.complex128)})
        self.assertIn("'np.c'", str(e.exception))
        with self.assertRaises(ValueError) as e:
            dc.layout({"be": np.zeros(2, dtype=">f4")})
        self.assertIn("'be'", str(e.exception))
        self.assertIn("big-endian", str(e.exception))
        with self.assertRaises(TypeError) as e:
            dc.layout({"lst": [1.0, 2.0]})
        self.assertIn("'lst'", str(e.exception))
        with self.assertRaises(TypeError) as e:  # a numpy scalar has no memory to refit
            dc.layout({"scalar": np.float32(1.0)})
        self.assertIn("'scalar'", str(e.exception))


@unittest.skipIf(MISSING, MISSING or "")
class Checks(unittest.TestCase):
    def test_non_contiguous_is_refused_naming_the_tensor(self):
        sd = {"a": torch.zeros(4), "w.T": torch.zeros(8, 4).t()}
        for call in (lambda: dc.layout(sd), lambda: dc.placement(sd),
                     lambda: dc.diff_tensors(sd, sd)):
            with self.assertRaises(ValueError) as e:
                call()
            self.assertIn("'w.T'", str(e.exception))
            self.assertIn(".contiguous()", str(e.exception))
        with self.assertRaises(ValueError) as e:
            dc.layout({"col": np.zeros((6, 6), dtype=np.float32)[:, 1]})
        self.assertIn("'col'", str(e.exception))
        self.assertIn("not C-contiguous", str(e.exception))
        # a contiguous slice is fine: its memory is the tensor's own
        base = torch.arange(12, dtype=torch.float32)
        tensors, segments, memory = dc.placement({"s": base[4:8]})
        self.assertEqual(segments, [("s", 0, (base.data_ptr() + 16, 16))])
        self.assertEqual((tensors, memory), ([("s", "F32", 4)], "host"))

    def test_devices(self):
        with self.assertRaises(ValueError) as e:
            dc.placement({"cpu": torch.zeros(2), "m": torch.zeros(2, device="meta")})
        self.assertIn("'m'", str(e.exception))
        self.assertIn("meta", str(e.exception))
        if not torch.cuda.is_available():
            self.skipTest(f"torch.cuda.is_available() is False (torch {torch.__version__}; "
                          "Debian's python3-torch is CPU-only): the mixed CPU/CUDA and CUDA "
                          "pointer checks need a CUDA torch and a GPU")
        g = torch.zeros(8, device="cuda")
        with self.assertRaises(ValueError) as e:
            dc.placement({"a.cpu": torch.zeros(2), "b.gpu": g})
        self.assertIn("'a.cpu' on cpu", str(e.exception))
        self.assertIn("'b.gpu' on cuda:", str(e.exception))
        tensors, segments, memory = dc.placement({"b.gpu": g})
        self.assertEqual(memory, "cuda")
        self.assertEqual(segments, [("b.gpu", 0, (g.data_ptr(), 32))])

    def test_push_synchronizes_cuda_devices(self):
        """A from_state_dict sender's push() waits for the work queued on
        its CUDA tensors' devices, once per device, and never for CPU
        tensors (torch.cuda.synchronize recorded: this torch is CPU-only)."""
        class Dev:
            def __init__(self, s):
                self.type, self._s = s.split(":")[0], s

            def __str__(self):
                return self._s

        class T:
            def __init__(self, d):
                self.device = Dev(d)

        h = type("H", (), {})()
        h._sd_views = [("a", T("cuda:1"), 0, 4), ("b", T("cuda:0"), 0, 4),
                       ("c", T("cuda:1"), 0, 4), ("d", torch.zeros(2), 0, 8)]
        seen, real = [], torch.cuda.synchronize
        torch.cuda.synchronize = seen.append
        try:
            dc._sync_cuda(h)
            self.assertEqual(seen, ["cuda:0", "cuda:1"])
            seen.clear()
            h._sd_views = [("d", torch.zeros(2), 0, 8)]
            dc._sync_cuda(h)
            self.assertEqual(seen, [])
        finally:
            torch.cuda.synchronize = real

    def test_order_and_fingerprint(self):
        a = {"z": torch.zeros(2), "a": torch.zeros(3, dtype=torch.bfloat16)}
        b = {"a": torch.ones(3, dtype=torch.bfloat16), "z": np.ones(2, dtype=np.float32)}
        self.assertEqual(dc.layout(a), [("a", "BF16", (3,)), ("z", "F32", (2,))])
        self.assertEqual(dc.layout(a, order="given"), [("z", "F32", (2,)), ("a", "BF16", (3,))])
        self.assertEqual(dc.layout_fingerprint(a), dc.layout_fingerprint(b))
        self.assertNotEqual(dc.layout_fingerprint(a, order="given"),
                            dc.layout_fingerprint(b, order="given"))
        self.assertRegex(dc.layout_fingerprint(a), "^[0-9a-f]{16}$")
        # a layout survives JSON (lists for tuples), e.g. shipped between nodes
        import json
        self.assertIsNone(dc.layout_difference(json.loads(json.dumps(dc.layout(a))), b))
        with self.assertRaises(ValueError):
            dc.layout(a, order="random")

    def test_layout_mismatch_names_the_first_differing_tensor(self):
        mine = {"emb": torch.zeros(10, 4), "h.0.w": torch.zeros(4, 4), "h.1.w": torch.zeros(4, 4)}
        cases = [
            ({"emb": torch.zeros(10, 4), "h.0.w": torch.zeros(4, 5), "h.1.w": torch.zeros(4, 4)},
             1, "tensor 1: here 'h.0.w' F32 [4, 4], expected 'h.0.w' F32 [4, 5] (the shape"),
            ({"emb": torch.zeros(10, 4), "h.0.w": torch.zeros(4, 4),
              "h.1.w": torch.zeros(4, 4, dtype=torch.float16)},
             2, "expected 'h.1.w' F16 [4, 4] (the dtype differs)"),
            ({"emb": torch.zeros(10, 4), "h.0.w": torch.zeros(4, 4)}, 2,
             "tensor 2: here 'h.1.w' F32 [4, 4], expected nothing (3 tensors here, 2 expected)"),
            ({"emb": torch.zeros(10, 4), "h.0.b": torch.zeros(4, 4), "h.1.w": torch.zeros(4, 4)},
             1, "here 'h.0.w' F32 [4, 4], expected 'h.0.b' F32 [4, 4] (the name differs)"),
        ]
        for theirs, idx, text in cases:
            with self.assertRaises(dc.LayoutMismatch) as e:
                dc.check_layout(mine, dc.layout(theirs))
            self.assertIn(text, str(e.exception))
            self.assertEqual(e.exception.index, idx)
            self.assertIn(dc.layout_fingerprint(theirs), str(e.exception))
        dc.check_layout(mine, dc.layout(clone(mine)))  # equal: no error
        # diff_tensors refuses two state dicts of different layouts the same way
        with self.assertRaises(dc.LayoutMismatch) as e:
            dc.diff_tensors(mine, cases[0][0])
        self.assertIn("'h.0.w'", str(e.exception))

    def test_expect_layout_fails_before_opening(self):
        """from_state_dict(expect_layout=) and a receiver's read-only array
        are refused before anything opens."""
        mine = {"w": torch.zeros(4)}
        with tempfile.TemporaryDirectory() as tmp:
            topo = dc.Topology.local(1, 1, free_port_block(2))
            with self.assertRaises(dc.LayoutMismatch) as e:
                dc.Sender.from_state_dict(mine, topo, tmp,
                                          expect_layout=[("w", "BF16", (4,))])
            self.assertIn("'w' F32 [4], expected 'w' BF16 [4]", str(e.exception))
            self.assertEqual(os.listdir(tmp), [])
            ro = np.zeros(4, dtype=np.float32)
            ro.setflags(write=False)
            with self.assertRaises(ValueError) as e:  # a receiver writes its tensors
                dc.Receiver.from_state_dict({"a": torch.zeros(2), "ro": ro}, topo, tmp, rank=1)
            self.assertIn("'ro' is read-only", str(e.exception))
            with self.assertRaises(dc.LayoutMismatch):
                dc.Receiver.from_state_dict(mine, topo, tmp, rank=1,
                                            expect_layout=[("v", "F32", (4,))])
            self.assertEqual(os.listdir(tmp), [])
            topo.close()


@unittest.skipIf(MISSING, MISSING or "")
class DiffApply(unittest.TestCase):
    def test_wrong_base_leaves_tensors_untouched(self):
        g = torch.Generator().manual_seed(4)
        base = {"a": torch.randn(1000, generator=g).to(torch.bfloat16),
                "b": np.arange(300, dtype=np.int32)}
        nxt = clone(base)
        nxt["a"][::10] += 1
        nxt["b"][5] = -1
        delta = dc.diff_tensors(base, nxt)
        other = clone(base)
        other["a"][3] = 42  # another base
        before = {k: raw(v) for k, v in other.items()}
        with self.assertRaises(dc.DeltacastError) as e:
            dc.apply_tensors(other, delta)
        self.assertEqual(e.exception.name, "DC_ERR_WRONG_BASE")
        self.assertEqual({k: raw(v) for k, v in other.items()}, before)
        # a corrupt delta: refused, nothing written
        bad = bytearray(delta)
        bad[len(bad) // 2] ^= 0x40
        with self.assertRaises(dc.DeltacastError):
            dc.apply_tensors(other, bytes(bad))
        self.assertEqual({k: raw(v) for k, v in other.items()}, before)
        # a delta whose target has another layout (made from images of
        # other names by the codec directly): refused, nothing written
        ren = {"a": base["a"], "c": base["b"]}
        foreign = dc.diff_bytes(dc._st_image(dc._views(base)), dc._st_image(dc._views(ren)))
        tgt = clone(base)
        with self.assertRaises(dc.LayoutMismatch) as e:
            dc.apply_tensors(tgt, foreign)
        self.assertIn("expected 'c'", str(e.exception))
        self.assertEqual({k: raw(v) for k, v in tgt.items()},
                         {k: raw(v) for k, v in base.items()})
        # the right base takes it; applied twice is a wrong base again
        tgt = clone(base)
        dc.apply_tensors(tgt, delta)
        self.assertEqual({k: raw(v) for k, v in tgt.items()},
                         {k: raw(v) for k, v in nxt.items()})
        with self.assertRaises(dc.DeltacastError):
            dc.apply_tensors(tgt, delta)
        ro = clone(base)
        ro["b"].setflags(write=False)
        with self.assertRaises(ValueError) as e:
            dc.apply_tensors(ro, delta)
        self.assertIn("'b'", str(e.exception))

    def test_buffers(self):
        rng = np.random.default_rng(5)
        base = rng.integers(0, 256, 100000, dtype=np.uint8)
        nxt = base.copy()
        nxt[::1000] ^= 0x11
        for make in (bytes, bytearray, memoryview, np.array, torch.from_numpy):
            rawbuf = make in (bytes, bytearray, memoryview)
            b = make(base.tobytes() if rawbuf else base.copy())
            n = make(nxt.tobytes() if rawbuf else nxt.copy())
            delta = dc.diff_buffer(b, n)
            self.assertLess(len(delta), 100000 // 4, make.__name__)
            tgt = bytearray(base.tobytes())
            dc.apply_buffer(tgt, delta)
            self.assertEqual(bytes(tgt), nxt.tobytes(), make.__name__)
        # typed arrays are raw bytes to diff_buffer: a float32 array applies
        # to a bytearray of the same bytes
        f = rng.standard_normal(5000).astype(np.float32)
        f2 = f.copy()
        f2[7] = -0.0
        t = torch.from_numpy(f.copy())
        dc.apply_buffer(t, dc.diff_buffer(f, f2))
        self.assertEqual(raw(t), f2.tobytes())
        # wrong base: untouched; read-only; lengths differ
        delta = dc.diff_buffer(base, nxt)
        wrong = bytearray(nxt.tobytes())
        with self.assertRaises(dc.DeltacastError) as e:
            dc.apply_buffer(wrong, delta)
        self.assertEqual(e.exception.name, "DC_ERR_WRONG_BASE")
        self.assertEqual(bytes(wrong), nxt.tobytes())
        with self.assertRaises(ValueError):
            dc.apply_buffer(base.tobytes(), delta)
        with self.assertRaises(ValueError) as e:
            dc.diff_buffer(b"abc", b"abcd")
        self.assertIn("3 and 4", str(e.exception))
        with self.assertRaises(ValueError):
            dc.diff_buffer(np.zeros((4, 4))[:, 0], np.zeros(4))


def st_file(sd, path):
    """Write the state dict as a safetensors file in canonical order (what
    a rollout node started with `deltacast node --weights` holds)."""
    with open(path, "wb") as f:
        f.write(dc._st_image(dc._views(sd)))


@unittest.skipIf(MISSING, MISSING or "")
@unittest.skipUnless(BIN, "DELTACAST_BIN not set (run through meson test)")
class Refit(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="dc-py-torch-")
        self.env = dict(DELTACAST_SECRET="py-torch-secret", DELTACAST_TRANSPORT="tcp",
                        DELTACAST_TIMEOUT_MS="2000")
        os.environ.update(self.env)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_state_dict_sender_every_dtype(self):
        """A torch model's state dict (every dtype, a numpy array among the
        tensors) sent from its own memory by Sender.from_state_dict to a
        `deltacast node --weights` receiver: after each push the receiver's
        file equals the trainer's tensors bit for bit."""
        have, _ = torch_dtypes()
        g = torch.Generator().manual_seed(11)
        sd = {f"layer.{s}": random_tensor(dt, 20000 + 7 * i, g) for i, (dt, s) in enumerate(have)}
        sd["np.u64"] = np.arange(999, dtype=np.uint64)
        sd["zero"] = torch.zeros(0)
        port = free_port_block(2)
        w = os.path.join(self.tmp, "w1.safetensors")
        st_file(sd, w)
        rx = subprocess.Popen([BIN, "node", "--local", f"1:1:{port}", "--rank", "1",
                               "--weights", w, "--state", os.path.join(self.tmp, "st1"),
                               "--chunk-size", "64KiB"],
                              env=dict(os.environ, **self.env), stderr=subprocess.PIPE)
        topo = dc.Topology.local(1, 1, port)
        try:
            with dc.Sender.from_state_dict(sd, topo, os.path.join(self.tmp, "st0"),
                                           chunk_size=64 * 1024, wait_ms=30000) as snd:
                self.assertEqual(snd.layout, dc.layout(sd))
                for v in (1, 2):
                    for k, t in changed(sd, 20 + v).items():  # the optimizer step, in place
                        if torch.is_tensor(t):
                            sd[k].copy_(t)
                        else:
                            sd[k][:] = t
                    stats = snd.push()
                    self.assertEqual(stats["version"], v)
                    with open(w, "rb") as f:
                        got = f.read()
                    self.assertEqual(got, dc._st_image(dc._views(sd)), f"after v{v}")
                # a tensor replaced instead of updated in place: refused by name
                old = sd["layer.F32"]
                sd["layer.F32"].data = torch.zeros_like(old)
                with self.assertRaises(ValueError) as e:
                    snd.push()
                self.assertIn("'layer.F32' moved", str(e.exception))
        finally:
            _, err = rx.communicate(timeout=60)
            topo.close()
        self.assertEqual(rx.returncode, 0, err.decode(errors="replace"))
        self.assertEqual(dc.refit_committed(os.path.join(self.tmp, "st0"))[:2], (2, 1))

    def test_state_dict_receiver(self):
        """Receiver.from_state_dict writes into a rollout model's own tensors
        (examples/trainer.py's model, bf16) while examples/trainer.py pushes
        3 versions from another process: committed events 1, 2, 3, then the
        job ends, and the rollout model's bytes equal the trainer's."""
        examples = os.path.join(os.path.dirname(HERE), "examples")
        sys.path.insert(0, examples)
        try:
            from trainer import build_model, weights_bytes
        finally:
            sys.path.remove(examples)
        port = free_port_block(2)
        out0 = os.path.join(self.tmp, "out0.bin")
        tr = subprocess.Popen([sys.executable, os.path.join(examples, "trainer.py"),
                               f"local:1:{port}", "3", os.path.join(self.tmp, "st0"), out0],
                              env=dict(os.environ, **self.env, PYTHONPATH=HERE),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        model = build_model().to(torch.bfloat16)
        sd = model.state_dict()
        v0 = weights_bytes(sd)
        topo = dc.Topology.local(1, 1, port)
        committed, tout = [], b""
        try:
            with dc.Receiver.from_state_dict(sd, topo, os.path.join(self.tmp, "st1"),
                                             rank=1) as rx:
                self.assertEqual(rx.layout, dc.layout(sd))
                while True:
                    ev = rx.wait(60)
                    self.assertIsNotNone(ev, "no event in 60 s")
                    if ev["type"] == "committed":
                        committed.append(ev["version"])
                    if ev["type"] == "ended":
                        self.assertEqual(ev["status"], 0, ev["message"])
                        break
                self.assertTrue(rx.close())  # the job ended: nothing to cancel
            tout, _ = tr.communicate(timeout=120)
        finally:
            if tr.poll() is None:
                tr.kill()
                tr.wait()
            topo.close()
        self.assertEqual(committed, [1, 2, 3])
        self.assertEqual(tr.returncode, 0, tout.decode(errors="replace"))
        with open(out0, "rb") as f:
            want = f.read()
        self.assertNotEqual(v0, want, "the trainer's steps must change the weights")
        self.assertEqual(weights_bytes(sd), want)
        with open(out0 + ".v3", "rb") as f:
            self.assertEqual(f.read(), want)

    def test_state_dict_receiver_of_another_layout(self):
        """A rollout model that lacks one of the trainer's tensors: the
        engine refuses the first version at once; the "ended" event and
        close() say "layout mismatch" with this node's layout fingerprint."""
        examples = os.path.join(os.path.dirname(HERE), "examples")
        sys.path.insert(0, examples)
        try:
            from trainer import build_model
        finally:
            sys.path.remove(examples)
        port = free_port_block(2)
        tr = subprocess.Popen([sys.executable, os.path.join(examples, "trainer.py"),
                               f"local:1:{port}", "1", os.path.join(self.tmp, "st0")],
                              env=dict(os.environ, **self.env, PYTHONPATH=HERE),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sd = build_model().to(torch.bfloat16).state_dict()
        sd.pop("5.bias")  # the head's bias: one tensor fewer than the trainer's
        topo = dc.Topology.local(1, 1, port)
        try:
            rx = dc.Receiver.from_state_dict(sd, topo, os.path.join(self.tmp, "st1"), rank=1)
            while True:
                ev = rx.wait(60)
                self.assertIsNotNone(ev, "no event in 60 s")
                if ev["type"] == "ended":
                    break
            self.assertNotEqual(ev["status"], 0)
            fp = dc.layout_fingerprint(sd)
            self.assertIn("layout mismatch", ev["message"])
            self.assertIn(fp, ev["message"])
            with self.assertRaises(dc.DeltacastError) as e:
                rx.close()
            self.assertIn("layout mismatch", str(e.exception))
            self.assertIn(fp, str(e.exception))
        finally:
            tr.kill()  # its push waits for the refused receiver (until abort_ms)
            tr.wait()
            topo.close()


if __name__ == "__main__":
    unittest.main()

"""Tests of how the module finds its library (source tree, $DELTACAST_LIB,
the copy `meson install` stamps) and of its public names (__all__)."""
import os
import shutil
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deltacast as dc  # noqa: E402

SONAME = "libdeltacast.so." + ".".join(dc.__version__.split(".")[:2])


def _run(code, module_dir, env_lib=None, cwd=None):
    """Run `code` in a fresh python that imports deltacast from module_dir."""
    env = {k: v for k, v in os.environ.items() if k not in ("DELTACAST_LIB", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = module_dir
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if env_lib:
        env["DELTACAST_LIB"] = env_lib
    return subprocess.run([sys.executable, "-c", "import deltacast as dc\n" + code],
                          env=env, cwd=cwd or tempfile.gettempdir(), capture_output=True,
                          text=True, timeout=60)


class PublicNames(unittest.TestCase):
    def test_all_is_complete(self):
        public = {n for n, v in vars(dc).items()
                  if not n.startswith("_") and not isinstance(v, types.ModuleType)
                  and getattr(v, "__module__", None) == dc.__name__}
        self.assertIn("Sender", public)  # the filter sees the module's own names
        self.assertEqual(sorted(public - set(dc.__all__)), [], "public but not in __all__")
        missing = [n for n in dc.__all__ if not hasattr(dc, n)]
        self.assertEqual(missing, [], "in __all__ but not defined")
        self.assertEqual(len(dc.__all__), len(set(dc.__all__)), "__all__ has duplicates")

    def test_star_import(self):
        ns = {}
        exec("from deltacast import *", ns)
        for n in ("Sender", "Topology", "DeltacastError", "library_path", "__version__"):
            self.assertIn(n, ns)


class LibraryLookup(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lib = os.environ.get("DELTACAST_LIB")
        if not cls.lib:
            raise unittest.SkipTest("DELTACAST_LIB (the build's library) is not set")

    def test_env_is_used_and_said(self):
        r = _run("print(dc.library_path()); print(dc.version())", HERE, env_lib=self.lib)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(repr((self.lib, "$DELTACAST_LIB")), r.stdout)
        self.assertIn(dc.__version__, r.stdout)
        self.assertIn(f"loading {self.lib} (DELTACAST_LIB)", r.stderr)

    def test_source_tree_does_not_load_a_build_tree(self):
        # (meson test sets LD_LIBRARY_PATH to the build; _run clears it)
        r = _run(f"import ctypes; ctypes.CDLL({SONAME!r})", HERE)
        if r.returncode == 0:
            self.skipTest(f"{SONAME} is installed on the loader's path here")
        r = _run("dc.version()", HERE)  # the checkout has a build/ beside python/
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("OSError", r.stderr)
        self.assertIn(f"{SONAME} is not on the system loader's path", r.stderr)
        self.assertIn("DELTACAST_LIB", r.stderr)
        self.assertNotIn("loading", r.stderr)

    def _stamped(self, tmp, libdir, pydir):
        """A module stamped as meson install does, the library in libdir."""
        os.makedirs(pydir)
        r = subprocess.run([sys.executable, os.path.join(HERE, "stamp_install.py"),
                            os.path.join(HERE, "deltacast.py"), os.path.join(pydir, "deltacast.py"),
                            libdir, pydir, SONAME], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_installed_copy_loads_its_library(self):
        with tempfile.TemporaryDirectory() as tmp:
            libdir = os.path.join(tmp, "prefix", "lib", "x86_64-linux-gnu")
            pydir = os.path.join(tmp, "prefix", "lib", "python3", "dist-packages")
            self._stamped(tmp, libdir, pydir)
            with open(os.path.join(pydir, "deltacast.py")) as f:
                self.assertIn(f"_INSTALLED_LIB = ('../../x86_64-linux-gnu', '{SONAME}')", f.read())
            r = _run("dc.version()", pydir)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(f"{os.path.join(libdir, SONAME)}, the library installed with this "
                          "module", r.stderr)
            os.makedirs(libdir)
            shutil.copy(self.lib, os.path.join(libdir, SONAME))
            # moved as a whole (as DESTDIR stages it): still found
            moved = os.path.join(tmp, "moved")
            os.rename(os.path.join(tmp, "prefix"), moved)
            mpy = os.path.join(moved, "lib", "python3", "dist-packages")
            r = _run("print(dc.library_path()); print(dc.version())", mpy)
            self.assertEqual(r.returncode, 0, r.stderr)
            want = (os.path.join(moved, "lib", "x86_64-linux-gnu", SONAME),
                    "installed beside this module")
            self.assertIn(repr(want), r.stdout)
            self.assertIn(dc.__version__, r.stdout)
            self.assertEqual(r.stderr, "")
            # $DELTACAST_LIB still wins (the user asked)
            r = _run("print(dc.library_path())", mpy, env_lib=self.lib)
            self.assertIn(repr((self.lib, "$DELTACAST_LIB")), r.stdout)

    def test_stamp_needs_its_marker(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "in.py")
            with open(src, "w") as f:
                f.write("x = 1\n")
            r = subprocess.run([sys.executable, os.path.join(HERE, "stamp_install.py"), src,
                                os.path.join(tmp, "out.py"), "/usr/lib", "/usr/lib/py", SONAME],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertIn("has 0 lines '_INSTALLED_LIB = None'", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(tmp, "out.py")))

    def test_version_mismatch_is_refused(self):
        r = _run("dc.__version__ = '0.1.0'\ndc.version()", HERE, env_lib=self.lib)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"is libdeltacast {dc.__version__}, but this module", r.stderr)
        self.assertIn("mirrors 0.1.0", r.stderr)


if __name__ == "__main__":
    unittest.main()

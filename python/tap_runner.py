"""Run unittest test modules and print TAP (for meson's tap protocol)."""
import sys
import unittest


class TapResult(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.n = 0

    def _line(self, ok, test, extra=""):
        self.n += 1
        print(f"{'ok' if ok else 'not ok'} {self.n} - {test.id()}{extra}", flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._line(True, test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._line(False, test)
        print("# " + self._exc_info_to_string(err, test).replace("\n", "\n# "))

    def addError(self, test, err):
        super().addError(test, err)
        self._line(False, test)
        print("# " + self._exc_info_to_string(err, test).replace("\n", "\n# "))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._line(True, test, f" # SKIP {reason}")


def main(paths):
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    for p in paths:
        d, f = p.rsplit("/", 1) if "/" in p else (".", p)
        sys.path.insert(0, d)
        suite.addTests(loader.loadTestsFromName(f[:-3]))
    print("TAP version 13")
    print(f"1..{suite.countTestCases()}", flush=True)
    r = TapResult()
    suite.run(r)
    return 0 if r.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

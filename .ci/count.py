#!/usr/bin/env python3
"""Count test cases (TAP subtests, or whole tests for non-TAP ones) in the
meson test logs of the given build directories, print one line per build and
the closing 'N passed, N failed, N skipped' line."""
import json
import re
import sys

total = {"passed": 0, "failed": 0, "skipped": 0}
for d in sys.argv[1:]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    try:
        lines = open(f"{d}/meson-logs/testlog.json").read().splitlines()
    except OSError:
        print(f"{d}: no test log")
        counts["failed"] += 1
        lines = []
    tests = [json.loads(line) for line in lines]
    try:
        # a first run whose timed-out tests were run again (.ci/run): its
        # results, with the retried tests' replaced by the retry's
        first = [json.loads(l) for l in open(f"{d}/meson-logs/testlog-first.json")]
        retried = {t["name"].split(" / ")[-1]: t for t in tests}
        print(f"{d}: retried after a timeout: {' '.join(sorted(retried))}")
        tests = [retried.get(t["name"].split(" / ")[-1], t) for t in first]
    except OSError:
        pass
    for t in tests:
        out = t.get("stdout") or ""
        tap = [l for l in out.splitlines() if re.match(r"^(not )?ok\b", l)]
        if t.get("protocol") == "tap" or tap:
            for l in tap:
                if re.search(r"#\s*skip", l, re.I):
                    counts["skipped"] += 1
                elif l.startswith("not ok"):
                    counts["failed"] += 1
                else:
                    counts["passed"] += 1
            if t["result"] not in ("OK", "SKIP", "EXPECTEDFAIL") and not any(l.startswith("not ok") for l in tap):
                counts["failed"] += 1  # crashed or timed out without a failing line
        else:
            r = t["result"]
            key = "passed" if r in ("OK", "EXPECTEDFAIL") else "skipped" if r == "SKIP" else "failed"
            counts[key] += 1
    print(f"{d}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    for k in total:
        total[k] += counts[k]
print(f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
sys.exit(1 if total["failed"] or total["passed"] == 0 else 0)

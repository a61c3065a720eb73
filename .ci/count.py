#!/usr/bin/env python3
"""Count test cases (TAP subtests, or whole tests for non-TAP ones) in the
meson test logs of the given build directories (their testlog.json, or
BUILD/meson-logs/NAME.json for an argument BUILD:NAME, e.g. a sweep run's
--logbase), or in a file whose last line is 'N passed, N failed, N skipped'
(an argument ending in .txt, e.g. scripts/msan.sh's count.txt); print one
line per argument, then each failing test case by name (the CI log's tail
is often all that is kept), and the closing 'N passed, N failed, N skipped'
line."""
import glob
import json
import os
import re
import sys

total = {"passed": 0, "failed": 0, "skipped": 0}
failures = []  # "where: test: the failing line", printed before the closing count
for d in sys.argv[1:]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    if d.endswith(".txt"):
        try:
            last = open(d).read().strip().splitlines()[-1]
            m = re.match(r"^(\d+) passed, (\d+) failed(?:, (\d+) skipped)?$", last)
        except (OSError, IndexError):
            m = None
        if m:
            counts["passed"], counts["failed"] = int(m.group(1)), int(m.group(2))
            counts["skipped"] = int(m.group(3) or 0)
        else:
            print(f"{d}: no closing count")
            counts["failed"] += 1
            failures.append(f"{d}: no closing count")
        if counts["failed"]:
            try:
                for l in open(d).read().splitlines():
                    if l.startswith("not ok") or re.search(r"\bFAIL\b", l):
                        failures.append(f"{d}: {l.strip()[:200]}")
            except OSError:
                pass
        print(f"{d}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
        for k in total:
            total[k] += counts[k]
        continue
    log = "testlog"
    if ":" in d:
        d, log = d.split(":", 1)
    try:
        lines = open(f"{d}/meson-logs/{log}.json").read().splitlines()
    except OSError:
        print(f"{d}: no test log {log}")
        counts["failed"] += 1
        failures.append(f"{d}: no test log {log}")
        lines = []
    tests = [json.loads(line) for line in lines]
    first_path = f"{d}/meson-logs/testlog-first.json"
    if log == "testlog" and os.path.exists(first_path):
        # a first run whose timed-out tests ran again (.ci/run): each test's
        # result is its last run's
        by_name = {}
        for t in (json.loads(l) for l in open(first_path)):
            by_name[t["name"].split(" / ")[-1]] = t
        retried = set()
        for rp in sorted(glob.glob(f"{d}/meson-logs/testlog-retry*.json")):
            for t in (json.loads(l) for l in open(rp)):
                key = t["name"].split(" / ")[-1]
                by_name[key] = t
                retried.add(key)
        print(f"{d}: run again after a timeout: {' '.join(sorted(retried))}")
        tests = list(by_name.values())
    where = d if log == "testlog" else f"{d}:{log}"
    for t in tests:
        out = t.get("stdout") or ""
        tname = t["name"].split(" / ")[-1]
        tap = [l for l in out.splitlines() if re.match(r"^(not )?ok\b", l)]
        if t.get("protocol") == "tap" or tap:
            for l in tap:
                if re.search(r"#\s*skip", l, re.I):
                    counts["skipped"] += 1
                elif l.startswith("not ok"):
                    counts["failed"] += 1
                    failures.append(f"{where}: {tname}: {l[:200]}")
                else:
                    counts["passed"] += 1
            if t["result"] not in ("OK", "SKIP", "EXPECTEDFAIL") and not any(l.startswith("not ok") for l in tap):
                counts["failed"] += 1  # crashed or timed out without a failing line
                failures.append(f"{where}: {tname}: {t['result']} (no failing TAP line)")
        else:
            r = t["result"]
            key = "passed" if r in ("OK", "EXPECTEDFAIL") else "skipped" if r == "SKIP" else "failed"
            counts[key] += 1
            if key == "failed":
                failures.append(f"{where}: {tname}: {r}")
    name = d if log == "testlog" else f"{d}:{log}"
    print(f"{name}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    for k in total:
        total[k] += counts[k]
if failures:
    print("failed:")
    for f in failures:
        print(f"  {f}")
print(f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
sys.exit(1 if total["failed"] or total["passed"] == 0 else 0)

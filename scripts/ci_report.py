"""Prints what a CI run spent its time on: each step's wall time (STEPS: name<TAB>seconds
lines, written by .ci/run), then the 15 slowest tests of every build under ROOT (ctest's
CTestCostData.txt, and the pytest JUnit files that `make` leaves in build-wheel/junit).

Usage: python3 scripts/ci_report.py STEPS ROOT
"""
import glob
import os
import sys
import xml.etree.ElementTree as ET

steps_file, root = sys.argv[1], sys.argv[2]
steps = []
if os.path.exists(steps_file):
    with open(steps_file) as f:
        steps = [(n, int(s)) for n, s in (line.rstrip("\n").split("\t") for line in f if line.strip())]
total = sum(s for _, s in steps)
print("\n=== ci: steps (wall time)")
for name, secs in steps:
    print(f"  {name:<16} {secs // 60:3d} min {secs % 60:2d} s")
print(f"  {'total':<16} {total // 60:3d} min {total % 60:2d} s")

tests = []
for cost in glob.glob(os.path.join(root, "build*", "Testing", "Temporary", "CTestCostData.txt")):
    build = cost.split(os.sep)[-4]
    with open(cost) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[0] != "---":
                try:
                    tests.append((float(parts[2]), build, parts[0]))
                except ValueError:
                    pass
for junit in glob.glob(os.path.join(root, "build-wheel", "junit", "*.xml")):
    run = "python:" + os.path.basename(junit)[:-4]
    for case in ET.parse(junit).iter("testcase"):
        tests.append((float(case.get("time", 0)), run,
                      f"{case.get('classname', '')}.{case.get('name', '')}"))
tests.sort(reverse=True)
print("\n=== ci: the 15 slowest tests")
for secs, where, name in tests[:15]:
    print(f"  {secs:7.1f} s  {where:<22} {name}")

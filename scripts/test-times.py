#!/usr/bin/env python3
"""Per-layer test times from pytest's JUnit XML reports (written by `make test`): tests, summed time
(setup + call + teardown, across the parallel phase's workers) and the slowest modules of each layer,
so a CI log says where the suite's time goes.

    scripts/test-times.py .test-reports/parallel.xml .test-reports/serial.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def module_of(case: ET.Element) -> str:
    # classname is the dotted module path (tests.e2e.test_spine), a class name appended for test classes.
    parts = (case.get("classname") or "?").split(".")
    while parts and not parts[-1].startswith("test_"):
        parts.pop()
    return "/".join(parts) + ".py" if parts else case.get("classname") or "?"


def main(paths: list[str]) -> int:
    layers: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    modules: dict[str, float] = defaultdict(float)
    for path in paths:
        if not Path(path).is_file():
            print(f"test-times: {path} is missing (the phase did not run)")
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            module = module_of(case)
            layer = module.split("/")[1] if module.count("/") >= 2 else "other"
            seconds = float(case.get("time") or 0)
            layers[layer] += seconds
            counts[layer] += 1
            modules[module] += seconds
    print("test time per layer (summed over the parallel workers):")
    for layer in sorted(layers, key=layers.get, reverse=True):
        print(f"  {layer:<12} {counts[layer]:>5} tests  {layers[layer] / 60:7.1f} min")
    print("slowest modules:")
    for module in sorted(modules, key=modules.get, reverse=True)[:15]:
        print(f"  {modules[module]:7.1f} s  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

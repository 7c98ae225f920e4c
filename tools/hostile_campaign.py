#!/usr/bin/env python
"""The hostile-input campaign against transformer-cpp: every case of the table in
``tests/helpers/hostile_cases`` (the Python API, damaged checkpoints, the HTTP app and every command-line
subcommand, fed what a careless or hostile user would feed them), the test suite's cases and the
campaign-only ones too slow for it, classified one by one.

Each case runs in its own process under a time limit and an address-space limit
(``RLIMIT_AS``, 2 GB by default) and is classified clear-error / handled (passing) or crash /
traceback / unclear-error / silent-wrong / hang (failing); ``tests/helpers/hostile_cases/runner.py`` says
what each class means. API cases and most command-line cases run in a child forked from this
process after ``import transformer_cpp`` (so each costs milliseconds, not an interpreter start);
command lines whose environment or standard output matter at interpreter start or exit run
``python -m transformer_cpp`` as a user would. Everything works on tiny models and a tiny
Tatoeba-format file written into a temporary directory; the real data set is never read.

Usage (run it niced on a shared machine)::

    OMP_NUM_THREADS=1 nice -n 19 python tools/hostile_campaign.py [--out hostile.json]
        [--only SUBSTRING] [--shared | --extras] [--memory-gb 2] [--timeout 180] [--list] [--verbose]

It prints one line per case that is not ``clear-error`` or ``handled``, then a table of the
counts by class, and writes every case's result as JSON to ``--out`` (default
``hostile_campaign.json`` in the temporary directory, ``$TMPDIR`` or the system's). The exit status is 1 when any case is in a failing class.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

os.environ["OMP_NUM_THREADS"] = "1"  # before the import: the cases' children start without thread pools
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # for helpers.hostile_cases

from helpers.hostile_cases import CASES, setup  # noqa: E402  (imports transformer_cpp once; cases fork from here)
from helpers.hostile_cases.runner import CLASSES, FAILING, resident_bytes, run_case, warm_up  # noqa: E402


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        default=str(Path(tempfile.gettempdir()) / "hostile_campaign.json"),
        help="where to write the JSON results (default: %(default)s)",
    )
    parser.add_argument("--only", action="append", default=[], help="run only cases whose name holds this")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--shared", action="store_true", help="only the cases the test suite runs too")
    which.add_argument("--extras", action="store_true", help="only the campaign-only cases")
    parser.add_argument("--memory-gb", type=float, default=2.0, help="address-space limit per case")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per case (default 180)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--verbose", action="store_true", help="print every case")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)

    cases = [
        c
        for c in CASES
        if (not args.only or any(o in c.name for o in args.only))
        and not (args.shared and c.extra)
        and not (args.extras and not c.extra)
    ]
    if args.list:
        for c in cases:
            print(f"{c.kind:6} {c.expect:6} {'extra' if c.extra else 'shared':6} {c.name}")
        print(f"{len(cases)} cases")
        return 0
    memory = int(args.memory_gb * (1 << 30))
    root = Path(tempfile.mkdtemp(prefix="hostile-"))
    idle = 0
    started = time.monotonic()
    print(f"setting up in {root} ...", file=sys.stderr, flush=True)
    results = []
    counts = {k: 0 for k in CLASSES}
    try:
        warm_up()
        ctx = setup(root)
        idle = resident_bytes()  # what each forked case starts from
        for i, case in enumerate(cases, 1):
            work = root / "cases" / f"{i:04d}"
            outcome = run_case(case, ctx, work, memory, args.timeout)
            counts[outcome["class"]] += 1
            results.append(
                {"name": case.name, "kind": case.kind, "expect": case.expect, "extra": case.extra, "note": case.note}
                | outcome
            )
            if args.verbose or outcome["class"] in FAILING:
                print(
                    f"[{i:3d}/{len(cases)}] {outcome['class']:13} {case.kind:6} {case.name}: "
                    f"{' '.join(str(outcome.get('detail', '')).split())[:300]}",
                    flush=True,
                )
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
                shutil.rmtree(work.parent / f"{work.name}.io", ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    elapsed = time.monotonic() - started
    kinds = ("api", "cli", "script")
    print(f"\n{'class':15}" + "".join(f"{k:>8}" for k in kinds) + f"{'all':>8}")
    for k in CLASSES:
        row = [sum(1 for r in results if r["class"] == k and r["kind"] == kind) for kind in kinds]
        print(f"{k:15}" + "".join(f"{n:8}" for n in row) + f"{sum(row):8}")
    row = [sum(r["kind"] == kind for r in results) for kind in kinds]
    print(f"{'total':15}" + "".join(f"{n:8}" for n in row) + f"{len(results):8}   ({elapsed / 60:.1f} minutes)")
    Path(args.out).write_text(
        json.dumps(
            {
                "counts": counts,
                "seconds": round(elapsed, 1),
                "memory_bytes": memory,
                "idle_bytes": idle,
                "results": results,
            },
            indent=1,
            default=str,
        )
    )
    refused = [r for r in results if r["class"] == "clear-error"]
    if refused and idle:
        worst = max(refused, key=lambda r: r.get("peak_bytes", 0))
        slowest = max(refused, key=lambda r: r.get("command_seconds", r["seconds"]))
        print(
            f"refused inputs ({len(refused)}): peak memory at most {worst.get('peak_bytes', 0) / idle:.2f}x the idle "
            f"process ({idle / 2**20:.0f} MB; {worst['name']}), time to refuse at most "
            f"{slowest.get('command_seconds', slowest['seconds']):.2f} s "
            f"({slowest['name']})"
        )
    print(f"results: {args.out}")
    return 1 if any(counts[k] for k in FAILING) else 0


if __name__ == "__main__":
    sys.exit(main())

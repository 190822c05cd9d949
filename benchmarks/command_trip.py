"""How far a command travels through the package: the txlab files it enters and the calls between them.

    python benchmarks/command_trip.py -- --home /tmp/trip recl --study studies/table8.yaml --profile tiny xl-rnn
    python benchmarks/command_trip.py --moves -- ...    # also lists every move and how often it ran

Runs the `txlab` command given after ``--`` in this process under a profiler hook and counts, over
txlab's own functions only (torch, numpy and the standard library are left out, and so is code that
runs at import time):

- files entered: the txlab source files at least one of whose functions ran;
- moves: distinct calls from a function in one txlab file to a function in another (caller, callee);
- calls: how many times such cross-file calls happened in all.

A reader following the command opens the files and follows the moves; fewer of both is a command
that is easier to follow. The counts are of code that ran, so they depend on the command's inputs.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import txlab

PACKAGE = Path(txlab.__file__).resolve().parent


def _txlab_file(code) -> str | None:
    """The package-relative path of a txlab function's file; None for other code and module bodies."""
    if code.co_name == "<module>":
        return None
    path = Path(code.co_filename)
    if not path.is_absolute() or PACKAGE not in path.parents:
        return None
    return str(path.relative_to(PACKAGE.parent))


def trip(argv: list[str]) -> tuple[Counter, Counter]:
    """(calls per file, calls per cross-file edge) while ``txlab argv`` runs."""
    from txlab.cli import app

    entered: Counter = Counter()
    edges: Counter = Counter()

    def hook(frame, event, arg):
        if event != "call":
            return
        callee = _txlab_file(frame.f_code)
        if callee is None:
            return
        entered[callee] += 1
        caller_frame = frame.f_back
        while caller_frame is not None and _txlab_file(caller_frame.f_code) is None and caller_frame.f_code.co_name != "<module>":
            caller_frame = caller_frame.f_back
        if caller_frame is not None and caller_frame.f_code.co_name == "<module>":
            return  # called while a module is imported
        if caller_frame is None:
            return
        caller = _txlab_file(caller_frame.f_code)
        if caller != callee:
            edges[(f"{caller}:{caller_frame.f_code.co_name}", f"{callee}:{frame.f_code.co_name}")] += 1

    sys.setprofile(hook)
    try:
        app(argv)
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise
    finally:
        sys.setprofile(None)
    return entered, edges


def main() -> None:
    if "--" not in sys.argv:
        sys.exit("usage: python benchmarks/command_trip.py [--moves] -- TXLAB-ARGUMENTS...")
    split = sys.argv.index("--")
    entered, edges = trip(sys.argv[split + 1 :])
    print(f"files entered: {len(entered)}")
    print(f"moves (distinct cross-file calls): {len(edges)}")
    print(f"cross-file calls in all: {sum(edges.values())}")
    for file, calls in sorted(entered.items()):
        print(f"  {file}: {calls} calls")
    if "--moves" in sys.argv[1:split]:
        for (caller, callee), calls in sorted(edges.items()):
            print(f"  {caller} -> {callee}: {calls}")


if __name__ == "__main__":
    main()

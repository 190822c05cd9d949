"""txlab beside the authors' code, one process per round: the median speedup of each row over separate processes.

    python benchmarks/authors_processes.py --authors-code DIR [--processes 3] [--out results/bench/authors-separate-processes-cpu.md]

DIR holds `pytorch/mem_transformer.py` of kimiyoung/transformer-xl. Each process runs
`txlab bench model --authors-code DIR --json` on the rows asked for (training and evaluation at memory 128 and 512 of
the tiny and small shapes by default): within a process each row alternates txlab's model and the authors' on the
same shape and tokens, and reports the speedup of the median calls (txlab.measure.bench). Across processes, what
starting one leaves behind (allocator, thread pool, caches) cannot favour one side in all of them. The file written
holds the median speedup per row, the CPU, each process's speedups and ceilings, and each process's table as it printed it.

The speedups depend on the machine (docs/benchmarks.md). To see how far on the vector width alone, hold torch's kernels
and MKL's products to AVX2 on a CPU that has AVX-512: `ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 python
benchmarks/authors_processes.py ...`; the file's command then names them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("train", "eval_mem128", "eval_mem512")
KERNEL_LIMITS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")
"""Environment variables that hold torch's kernels and MKL's products to narrower vectors than the CPU has (to see how
the speedups depend on them); the command the file records names those that were set."""


def one_process(authors: Path, modes: list[str], threads: int, repeats: int, warmup: int) -> tuple[str, dict]:
    """(the table a `txlab bench model` process printed, its --json document)."""
    command = [sys.executable, "-m", "txlab", "bench", "model", "--authors-code", str(authors), "--threads", str(threads),
               "--repeats", str(repeats), "--warmup", str(warmup), *(arg for mode in modes for arg in ("--mode", mode)), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    table, _, document = done.stdout.rpartition("\n{")
    return table.strip(), json.loads("{" + document)


def medians(documents: list[dict]) -> list[dict]:
    """Per row (config, mode): each process's speedup and their median, in the first process's order."""
    rows = []
    for first in documents[0]["rows"]:
        key = (first["config"], first["mode"])
        each = [next(r["speedup"] for r in doc["rows"] if (r["config"], r["mode"]) == key) for doc in documents]
        rows.append({"config": key[0], "mode": key[1], "speedups": each, "median": statistics.median(each)})
    return rows


def markdown(rows: list[dict], documents: list[dict], tables: list[str], command: str) -> str:
    ceilings = [round(doc["matmul_peak_gflops"]) for doc in documents]
    machines = sorted({f"{doc['cpu']} ({doc['cpu_kernels']} kernels)" for doc in documents})
    lines = [f"| config | mode | speedup, processes {' / '.join(str(i + 1) for i in range(len(documents)))} | median | 2x |", "|---|---|---|---:|---|"]
    lines += [f"| {r['config']} | {r['mode']} | {' / '.join(f'{s:.3f}x' for s in r['speedups'])} | {r['median']:.3f}x | "
              f"{'met' if r['median'] >= 2 else 'not met'} |" for r in rows]  # the median unrounded: 1.996x is not 2x
    processes = "\n".join(f"## Process {i + 1}\n\n{table}\n" for i, table in enumerate(tables))
    return (f"Made on {datetime.date.today()} by\n\n    {command}\n\nOn {', '.join(machines)}. Matmul ceilings of the processes (2048³, GFLOP/s): "
            f"{', '.join(map(str, ceilings))}.\n\nMedian speedup over the {len(documents)} processes:\n\n" + "\n".join(lines) + f"\n\n{processes}")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--authors-code", type=Path, required=True, help="a folder holding pytorch/mem_transformer.py of kimiyoung/transformer-xl")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--mode", action="append", default=None, help=f"a row's mode, repeatable (default: {', '.join(MODES)})")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="where to write the Markdown")
    args = parser.parse_args(argv)
    modes = args.mode or list(MODES)
    tables, documents = [], []
    for i in range(args.processes):
        print(f"process {i + 1} of {args.processes}", file=sys.stderr, flush=True)
        table, document = one_process(args.authors_code, modes, args.threads, args.repeats, args.warmup)
        tables.append(table)
        documents.append(document)
    rows = medians(documents)
    limits = "".join(f"{name}={os.environ[name]} " for name in KERNEL_LIMITS if name in os.environ)
    command = limits + "python benchmarks/authors_processes.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = markdown(rows, documents, tables, command)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"written {args.out}", file=sys.stderr)
    return rows


if __name__ == "__main__":
    main()

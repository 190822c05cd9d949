"""Measuring time on a shared machine: medians after warm-up, the matmul ceiling, and who else ran.

The benchmarks (``txlab bench model``) and the speed table (``txlab speed``) time work the same way:

- a step is called ``warmup`` times untimed, then timed; the median is reported (:func:`median_seconds`);
- two implementations compared side by side are timed in alternation, one call each per round
  (:func:`interleaved_median_seconds`), so a competitor that comes and goes slows both alike; where one
  side's call is long and the time spent matters more than the number of calls, a round calls it until its
  share of a budget has passed (:func:`timed_rounds`);
- every figure is read against the machine's practical ceiling, the achieved GFLOP/s of a large fp32
  matmul measured in the same run (:func:`matmul_peak_gflops`), because that ceiling moves by 2x
  between machines of the same kind;
- each row records the share of all cores *other* processes used while it ran (:func:`cpu_snapshot`
  and :func:`others_cpu`, from /proc/stat minus this process's CPU time): with 2 threads on 2 cores a
  competitor stalls every parallel region, so rows with more than a few percent should be rerun;
- latency is summarised by nearest-rank percentiles of recorded per-token times (:func:`latency_percentiles`),
  and memory by the peak a block of work adds (:class:`PeakMemory`).
"""

from __future__ import annotations

import ctypes
import math
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable, Sequence

import torch

CONTENDED_SHARE = 0.10
"""Share of all cores other processes may take during a timing before its numbers are flagged: with
2 threads on 2 cores a competitor at 10% already stalls parallel regions often enough to move a
median (the committed tables timed on an idle machine record at most 2%)."""

CpuSnapshot = tuple[float, float, float]
"""Busy seconds of all cores, this process's CPU seconds, wall time."""


def median_seconds(step: Callable[[], object], warmup: int, repeats: int) -> float:
    """Median wall time of ``step()`` over ``repeats`` calls after ``warmup`` untimed calls."""
    return interleaved_median_seconds([step], warmup, repeats)[0]


def interleaved_median_seconds(steps: Sequence[Callable[[], object]], warmup: int, repeats: int) -> list[float]:
    """Median wall time of each step, timed in rounds of one call of each (after ``warmup`` rounds)."""
    for _ in range(warmup):
        for step in steps:
            step()
    times: list[list[float]] = [[] for _ in steps]
    for _ in range(repeats):
        for step, own in zip(steps, times):
            start = time.perf_counter()
            step()
            own.append(time.perf_counter() - start)
    return [statistics.median(own) for own in times]


def timed_rounds(steps: Sequence[Callable[[], object]], rounds: int, calls: Sequence[int], budgets_s: Sequence[float]) -> list[list[list[float]]]:
    """Wall times of ``steps`` called in alternation (warm them up first): each of ``rounds`` rounds calls every step
    in turn, step i ``calls[i]`` times and then again until ``budgets_s[i]`` seconds have passed in that round, so
    that load which comes and goes falls on every step alike. times[i][r] lists step i's call times in round r."""
    times: list[list[list[float]]] = [[] for _ in steps]
    for _ in range(rounds):
        for step, at_least, budget_s, own in zip(steps, calls, budgets_s, times):
            round_times: list[float] = []
            start = time.perf_counter()
            while len(round_times) < at_least or time.perf_counter() - start < budget_s:
                t0 = time.perf_counter()
                step()
                round_times.append(time.perf_counter() - t0)
            own.append(round_times)
    return times


def matmul_peak_gflops(threads: int = 2, size: int = 2048, repeats: int = 7, dtype: torch.dtype = torch.float32) -> float:
    """Achieved GFLOP/s of a large matmul in ``dtype`` (fp32 unless asked) on the CPU with ``threads`` threads: the practical ceiling."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        seconds = median_seconds(lambda: a @ b, 2, repeats)
    finally:
        torch.set_num_threads(previous)
    return 2 * size**3 / seconds / 1e9


def cuda_matmul_gflops(device: torch.device, dtype: torch.dtype, tf32: bool, size: int = 8192, repeats: int = 5) -> float:
    """Achieved GFLOP/s of an N^3 matmul in ``dtype`` on a CUDA device (fp32 with ``tf32``: on TF32 tensor cores), the
    fastest of ``repeats`` after two warm-ups: the GPU benchmark's shape (benchmarks/gpu.py), timed by CUDA events."""
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    previous = torch.backends.cuda.matmul.fp32_precision  # as txlab.precision sets it for a run
    torch.backends.cuda.matmul.fp32_precision = "tf32" if tf32 else "ieee"
    try:
        times = []
        for _ in range(2 + repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end) / 1e3)
    finally:
        torch.backends.cuda.matmul.fp32_precision = previous
    return 2 * size**3 / min(times[2:]) / 1e9


def cpu_snapshot() -> CpuSnapshot | None:
    """Where the machine stands now, for :func:`others_cpu`; None without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    own = resource.getrusage(resource.RUSAGE_SELF)
    return busy, own.ru_utime + own.ru_stime, time.perf_counter()


def others_cpu(start: CpuSnapshot | None) -> float | None:
    """Share of all cores used by other processes since ``start`` (0 = the machine was ours)."""
    end = cpu_snapshot()
    if start is None or end is None:
        return None
    wall = end[2] - start[2]
    others = (end[0] - start[0]) - (end[1] - start[1])
    return max(0.0, others / (wall * (os.cpu_count() or 1)))


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_kernels() -> str:
    """The vector instructions torch's CPU kernels run on here (``AVX512``, ``AVX2``, ...; ``ATEN_CPU_CAPABILITY`` can
    lower it). With the CPU's name and the matmul ceiling it tells apart machines on which a speedup over the same
    reference differs (docs/benchmarks.md)."""
    return torch.backends.cpu.get_cpu_capability()


def contention_note(shares: Sequence[tuple[object, float | None]], what: str = "row") -> str:
    """'' when every (label, share of others' CPU) is under :data:`CONTENDED_SHARE`, else one sentence
    naming the contended ones and the largest share, for the output and the figure."""
    busy = [(label, share) for label, share in shares if share is not None and share > CONTENDED_SHARE]
    if not busy:
        return ""
    worst = max(share for _, share in busy)
    which = f"every {what}" if len(busy) == len(shares) > 1 else f"{what} " + ", ".join(str(label) for label, _ in busy)
    return (f"other processes took up to {worst:.0%} of the CPU while timing ({which}; over {CONTENDED_SHARE:.0%} distorts "
            f"the numbers): rerun on an idle machine")


def latency_percentiles(per_token_seconds: Sequence[float], percents: Sequence[float] = (50, 99)) -> dict[float, float]:
    """Nearest-rank percentiles of recorded per-token times: for each p, the smallest recorded time such that at
    least p% of the tokens took no longer (the ceil(p/100 * n)-th smallest of n). Always one of the recorded
    times, never an interpolation: a p99 over fewer than 100 tokens is their slowest."""
    if not per_token_seconds:
        raise ValueError("no per-token times recorded")
    ordered = sorted(per_token_seconds)
    return {p: ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1] for p in percents}


class PeakMemory:
    """``with PeakMemory(device) as peak: ...``, then ``peak.bytes``: the most memory the block held at once beyond
    what was in use when it began (None where that cannot be told).

    On a GPU, tensors only: ``torch.cuda.max_memory_allocated`` after resetting its peak, less the allocation at the
    start. On a CPU, the process's resident set: its high-water mark (``VmHWM`` in /proc/self/status, reset by
    writing 5 to /proc/self/clear_refs) less the resident set at the start, after handing the memory freed by earlier
    work back to the system (glibc's ``malloc_trim``). That counts every page the block touched, tensors and
    interpreter alike, but not freed memory the allocator could not hand back and the block reused, so it is a
    lower bound on the block's own peak.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.bytes: int | None = None
        self._start: int | None = None

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
        else:
            _release_freed_memory()
            if _reset_resident_peak():
                self._start = _resident_kib("VmRSS") * 1024
        return self

    def __exit__(self, *exc) -> None:
        if self._start is None:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        else:
            peak = _resident_kib("VmHWM") * 1024
        self.bytes = max(0, peak - self._start)


def _release_freed_memory() -> None:
    """Hand the heap's free memory back to the system (glibc), so that the next block's pages count as new; elsewhere nothing."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _reset_resident_peak() -> bool:
    """Reset this process's resident-set high-water mark (Linux); False where it cannot be."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _resident_kib("VmHWM") > 0
    except OSError:
        return False


def _resident_kib(field: str) -> int:
    """A memory field of /proc/self/status in KiB (VmRSS: resident now, VmHWM: its peak); 0 if absent."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0

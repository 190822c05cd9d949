import io

import pytest

import txlab.progress
from txlab.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_log_gets_one_plain_line_per_five_percent_and_no_frames():
    log = io.StringIO()
    with Progress(total=100, desc="train", file=log) as bar:
        for _ in range(100):
            bar.update(1)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert [line.split()[1] for line in lines] == [f"{p}%" for p in range(0, 101, 5)]
    assert lines[-1].startswith("train: 100% 100/100")


def test_a_log_line_is_also_due_after_the_interval(monkeypatch):
    clock = iter(range(0, 10_000, 31))  # each reading of the clock is 31 s after the one before
    monkeypatch.setattr(txlab.progress.time, "monotonic", lambda: next(clock))
    log = io.StringIO()
    bar = Progress(total=1000, desc="losses", file=log, interval=30.0)
    for _ in range(3):
        bar.update(1)  # 0.1% each: never a 5% step, always past the interval
    bar.close()
    assert [line.split()[2] for line in log.getvalue().splitlines()] == ["0/1000", "1/1000", "2/1000", "3/1000"]


def test_a_bar_without_total_reports_counts_and_a_final_line():
    log = io.StringIO()
    bar = Progress(desc="download", file=log, unit="B")
    bar.update(10)
    bar.update(5)
    bar.close()
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("download: 0 ") and lines[-1].startswith("download: 15 ")


@pytest.mark.parametrize("leave", [True, False])
def test_a_terminal_gets_the_redrawn_bar(leave):
    screen = Terminal()
    with Progress(total=10, desc="eval", file=screen, leave=leave) as bar:
        bar.update(10)
    assert "\r" in screen.getvalue()


def test_disabled_writes_nothing():
    log = io.StringIO()
    with Progress(total=10, file=log, disable=True) as bar:
        bar.update(10)
    assert log.getvalue() == ""

"""Progress reports that read well on a terminal and in a log file.

On a terminal a progress bar redraws itself in place. Written to a file or a pipe, the same redraws
become thousands of carriage-return frames (a 12-minute run left 170 KB of them). So when the
stream is not a terminal, :class:`Progress` writes one plain line each time the work crosses another
``every`` of its total, or ``interval`` seconds after the last line, and one line at the end.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tqdm import tqdm


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


_LINE_WITH_TOTAL = "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
_LINE = "{desc}: {n_fmt} [{elapsed}, {rate_fmt}{postfix}]"


class Progress(tqdm):
    """A tqdm bar on a terminal; plain progress lines anywhere else.

    Takes tqdm's arguments. ``disable=None`` (tqdm's "only on a terminal") is read as "enabled",
    since the point of this class is to report in logs too.
    """

    def __init__(self, *args: Any, every: float = 0.05, interval: float = 30.0, file: Any = None, disable: bool | None = False, **kwargs: Any):
        file = sys.stderr if file is None else file
        self._as_lines = not _is_terminal(file)
        self._every = every
        self._interval = interval
        self._next_fraction = 0.0
        self._next_time = 0.0
        self._printed_n: float | None = None
        if self._as_lines:
            kwargs.update(mininterval=0, miniters=1)  # this class decides when a line is due
            kwargs.setdefault("bar_format", _LINE_WITH_TOTAL if kwargs.get("total", len(args[0]) if args and hasattr(args[0], "__len__") else None) else _LINE)
        super().__init__(*args, file=file, disable=bool(disable), **kwargs)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if not self._as_lines:
            return super().display(msg, pos)
        if msg == "":  # tqdm clearing its bar: a log has nothing to clear
            return True
        now = time.monotonic()
        fraction = self.n / self.total if self.total else None
        due = self._printed_n is None or now >= self._next_time or (fraction is not None and fraction + 1e-9 >= self._next_fraction)
        if due and self.n != self._printed_n:
            self._write_line(now, fraction)
        return True

    def _write_line(self, now: float, fraction: float | None) -> None:
        self.fp.write(self.__str__().strip() + "\n")
        self.fp.flush()
        self._printed_n = self.n
        self._next_time = now + self._interval
        if fraction is not None:
            steps_done = int(fraction / self._every + 1e-9)
            self._next_fraction = (steps_done + 1) * self._every

    def close(self) -> None:
        if self._as_lines and not self.disable:
            if self.n != self._printed_n:
                self._write_line(time.monotonic(), self.n / self.total if self.total else None)
            self.sp = None  # tqdm's own close would write terminal control characters
        super().close()

"""A one-line progress bar on stderr for long commands; where stderr is not a terminal (a log),
one line saying what is being done instead."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Call with ``(done, total)``; redraws at most ten times a second.

    Args:
        label: What is being counted, shown before the bar.
        stream: Where to draw (standard error by default).
        enabled: Draw or not; by default, only when ``stream`` is a terminal.
        rate: Show the count per second (leave it out when ``extra`` carries a better one).
        log: Printed once, on the first call, when the bar is not drawn (stderr is not a
            terminal), so that a log shows what is being measured and for how long; it can be
            set after construction, once that is known.
    """

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        rate: bool = True,
        log: str | None = None,
    ):
        self.label = label
        self.show_rate = rate
        self.log = log
        self._logged = False
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._start = time.monotonic()
        self._last = 0.0
        self._drawn = False
        self._width = 0  # of the last line drawn: a shorter one is padded over it

    def __call__(self, done: int, total: int, extra: str = "") -> None:
        """Redraw with ``done`` of ``total``; ``extra`` is shown after the rate."""
        if not self.enabled:
            if self.log is not None and not self._logged:
                self.stream.write(f"{self.log}\n")
                self.stream.flush()
                self._logged = True
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        fraction = done / total if total else 1.0
        filled = int(24 * fraction)
        rate = done / max(now - self._start, 1e-9)
        per_second = ""
        if self.show_rate:  # slow counts keep a decimal: "0/s" says nothing
            per_second = f"{rate:,.1f}/s " if rate < 10 else f"{rate:,.0f}/s "
        line = (
            f"{self.label} [{'#' * filled}{'.' * (24 - filled)}] {done}/{total} "
            f"{fraction:4.0%} {per_second}{extra}"
        )
        self.stream.write(f"\r{line.ljust(self._width)}")
        self._width = len(line)
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """End the line the bar was drawn on."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

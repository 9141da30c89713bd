"""What a training run shows while it runs: a status line and log lines.

On a terminal, one line is redrawn in place with the epoch's progress, the loss, the
throughput and the time left. Anywhere else (CI, a SLURM log, a pipe) the run prints plain
log lines instead, which read well in a file. train.py decides when to show them.
Experiment trackers (TensorBoard, ...) are in loggers.py, switched on with --logger.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

# Redraw the status line at most this often; a terminal write per step would cost time.
REDRAW_SECONDS = 0.2


class Progress:
    """The status line on a terminal, and plain lines elsewhere."""

    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stdout
        self.quiet = quiet  # show nothing at all
        self.live = self.stream.isatty()
        self.shown = ""  # the status line on screen, if any
        self.start: tuple[float, int] | None = None  # (time, samples) of the epoch's first step
        self.drawn_at = 0.0
        self.loss: float | None = None

    def step(self, epoch: int, step: int, done: int, total: int, loss: float | None = None) -> None:
        """Report a training step: ``done`` of ``total`` samples; ``loss`` only when known.

        The caller passes the loss only at its logging interval, since reading it from the
        device syncs with the host. Without a terminal, only those steps print a line.
        """
        now = time.perf_counter()
        if self.start is None:
            self.start = (now, done)
        if loss is not None:
            self.loss = loss
        if not self.live:
            if loss is not None:
                self.line(f"epoch {epoch} step {step} loss {loss:.4f}")
            return
        if loss is None and now - self.drawn_at < REDRAW_SECONDS:
            return
        self.drawn_at = now
        parts = [f"epoch {epoch}", f"{done}/{total}", f"{100 * done / max(total, 1):3.0f}%"]
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4f}")
        started, first = self.start
        if now > started and done > first:
            rate = (done - first) / (now - started)
            parts += [f"{rate:.0f} samples/s", f"ETA {_duration((total - done) / rate)}"]
        self._draw(" | ".join(parts))

    def line(self, message: str) -> None:
        """Print a log line, above the status line if there is one."""
        if self.quiet:
            return
        self._clear()
        print(message, file=self.stream, flush=True)

    def epoch(self, record: dict) -> None:
        """End the epoch: print its record."""
        self.line(shown(record))
        self.start, self.loss = None, None

    def _draw(self, text: str) -> None:
        if self.quiet:
            return
        # \r returns to the line start; the padding wipes what a longer line left behind.
        self.stream.write("\r" + text.ljust(len(self.shown)))
        self.stream.flush()
        self.shown = text

    def _clear(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * len(self.shown) + "\r")
            self.shown = ""


def shown(record: dict) -> str:
    """A record as ``key=value`` fields, its floats to 4 significant digits."""
    fields = (f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items())
    return " ".join(fields)


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"

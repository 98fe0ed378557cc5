"""A Keras-style text progress bar (``keras.utils.Progbar``).

Output matches Keras 3: ``1875/1875 ━━━━━━━━━━━━━━━━━━━━ 2s 1ms/step - loss: 0.5000``
for ``verbose=1`` (redrawn in place, an ETA instead of the elapsed time while
running) and ``1875/1875 - 2s - 1ms/step - loss: 0.5000`` once at the end for
``verbose=2``.
"""

import math
import os
import sys
import time

import numpy as np

__all__ = ["Progbar"]


def dynamic_display():
    """Whether the bar can be redrawn in place with ``\\r``.

    True on a terminal and in notebooks (Jupyter, Colab, PyCharm's console),
    which all honour carriage returns; elsewhere (a log file, a pipe) each
    update is written as its own line instead.
    """
    stdout = sys.stdout
    return bool(
        (hasattr(stdout, "isatty") and stdout.isatty())
        or "ipykernel" in sys.modules
        or "google.colab" in sys.modules
        or "PYCHARM_HOSTED" in os.environ
    )


def format_value(value):
    """Formats a metric the way Keras prints it: 4 decimals, or scientific
    notation when the magnitude is at most 1e-3 (so small losses stay legible)."""
    try:
        value = float(np.mean(value))
    except (TypeError, ValueError):
        return f"{value}"
    if abs(value) > 1e-3:
        return f"{value:.4f}"
    return f"{value:.4e}"


def format_step_time(seconds, unit_name):
    """`` 1ms/step`` style duration of one unit (leading space included)."""
    if seconds >= 1 or seconds == 0:
        return f" {seconds:.0f}s/{unit_name}"
    if seconds >= 1e-3:
        return f" {seconds * 1e3:.0f}ms/{unit_name}"
    return f" {seconds * 1e6:.0f}us/{unit_name}"


def format_eta(seconds):
    if seconds > 3600:
        return "%d:%02d:%02d" % (seconds // 3600, (seconds % 3600) // 60, seconds % 60)
    if seconds > 60:
        return "%d:%02d" % (seconds // 60, seconds % 60)
    return "%ds" % seconds


_BOLD = "\x1b[1m"
_GREEN = "\x1b[32m"
_DIM = "\x1b[37m"
_RESET = "\x1b[0m"


class Progbar:
    """Displays a progress bar.

    Args:
        target: total number of steps expected, or None if unknown.
        width: width of the bar in characters.
        verbose: 0 (silent), 1 (bar redrawn as it goes), 2 (one line at the end).
        interval: minimum time in seconds between two redraws with
            ``verbose=1``; updates in between only record values, so a fast
            training step never waits on the terminal.
        stateful_metrics: names shown as given; every other metric is averaged
            over the steps (weighted by steps). Give at most one of
            ``stateful_metrics`` and ``stateless_metrics``.
        stateless_metrics: names to average; every other metric is shown as given.
        unit_name: what a step is called in the time-per-unit figure.
    """

    def __init__(
        self,
        target,
        width=20,
        verbose=1,
        interval=0.05,
        stateful_metrics=None,
        stateless_metrics=None,
        unit_name="step",
    ):
        if stateful_metrics is not None and stateless_metrics is not None:
            raise ValueError(
                "Progbar: give at most one of `stateful_metrics` and "
                "`stateless_metrics`; received both "
                f"(stateful_metrics={stateful_metrics!r}, "
                f"stateless_metrics={stateless_metrics!r})."
            )
        self.target = target
        self.width = width
        self.verbose = verbose
        self.interval = interval
        self.unit_name = unit_name
        if stateless_metrics is not None:
            self.stateful_metrics = None
            self.stateless_metrics = set(stateless_metrics)
        else:
            self.stateful_metrics = set(stateful_metrics or ())
            self.stateless_metrics = None

        self._dynamic_display = dynamic_display()
        self._seen_so_far = 0
        # name -> [weighted sum, weight]; a list keeps first-seen order stable.
        self._values = {}
        self._values_order = []
        self._start = time.time()
        self._last_update = 0.0
        self._time_after_first_step = None
        self._prev_total_width = 0

    def _is_stateless(self, name):
        if self.stateful_metrics is not None:
            return name not in self.stateful_metrics
        return name in self.stateless_metrics

    def update(self, current, values=None, finalize=None):
        """Records progress up to step ``current`` and redraws if due.

        Args:
            current: index of the current step (1-based count of steps done).
            values: list of ``(name, value_for_last_step)`` pairs.
            finalize: whether this is the last update; defaults to
                ``current >= target``.
        """
        if finalize is None:
            finalize = self.target is not None and current >= self.target

        for name, value in values or ():
            if name not in self._values:
                self._values_order.append(name)
            if self._is_stateless(name) and not finalize:
                # Weight by the number of steps this value stands for, so
                # skipped calls still average correctly.
                weight = max(current - self._seen_so_far, 1)
                entry = self._values.get(name)
                if entry is None:
                    self._values[name] = [value * weight, weight]
                else:
                    entry[0] += value * weight
                    entry[1] += weight
            else:
                # A final value is the epoch's aggregate: show it as given.
                self._values[name] = [value, 1]
        self._seen_so_far = current

        now = time.time()
        if current == 1 and self._time_after_first_step is None:
            self._time_after_first_step = now

        if self.verbose == 1:
            if not finalize and now - self._last_update < self.interval:
                return
            self._draw(current, now, finalize)
        elif self.verbose == 2:
            if finalize and self.target is not None and self.target > 0:
                self._write_summary_line(current, now)
        self._last_update = now

    def add(self, n, values=None):
        """Advances the bar by ``n`` steps."""
        self.update(self._seen_so_far + n, values)

    def _step_duration(self, current, now):
        # The first step usually includes one-off setup; leave it out of the
        # estimate once there is anything else to go on.
        if not current:
            return 0.0
        if self._time_after_first_step is not None and current > 1:
            return (now - self._time_after_first_step) / (current - 1)
        return (now - self._start) / current

    def _metrics_text(self):
        parts = []
        for name in self._values_order:
            total, weight = self._values[name]
            if isinstance(total, str):
                parts.append(f" - {name}: {total}")
            else:
                parts.append(f" - {name}: {format_value(np.mean(total) / max(1, weight))}")
        return "".join(parts)

    def _draw(self, current, now, finalize):
        styled = self._dynamic_display
        time_per_unit = self._step_duration(current, now)
        known_target = self.target is not None and self.target > 0

        if known_target:
            digits = int(math.log10(self.target)) + 1
            count = f"{current:{digits}d}/{self.target}"
            done = min(int(self.width * current / self.target), self.width)
            if styled:
                bar = (
                    f"{_BOLD}{count}{_RESET} "
                    + (f"{_GREEN}{'━' * done}{_RESET}" if done else "")
                    + f"{_DIM}{'━' * (self.width - done)}{_RESET}"
                )
            else:
                # Without colour the two halves must look different.
                bar = f"{count} " + "━" * done + "─" * (self.width - done)
            plain_len = len(count) + 1 + self.width
        else:
            bar = f"{current:7d}/Unknown"
            plain_len = len(bar)

        if known_target and not finalize:
            clock = format_eta(time_per_unit * (self.target - current))
        else:
            clock = f"{now - self._start:.0f}s"
        info = (
            (f" {_BOLD}{clock}{_RESET}" if styled else f" {clock}")
            + format_step_time(time_per_unit, self.unit_name)
            + self._metrics_text()
        )
        plain_len += len(info) - (len(_BOLD) + len(_RESET) if styled else 0)

        if styled:
            # Redraw in place; pad so a shorter line fully covers the last one.
            message = "\r" + bar + info
            if self._prev_total_width > plain_len:
                message += " " * (self._prev_total_width - plain_len)
            if finalize:
                message += "\n"
        else:
            message = bar + info + "\n"
        self._prev_total_width = plain_len
        _write(message)

    def _write_summary_line(self, current, now):
        digits = int(math.log10(self.target)) + 1
        line = (
            f"{current:{digits}d}/{self.target} - {now - self._start:.0f}s -"
            + format_step_time(self._step_duration(current, now), self.unit_name)
            + self._metrics_text()
            + "\n"
        )
        _write(line)


def _write(message):
    # Look sys.stdout up at each call: notebooks and test harnesses swap it.
    stream = sys.stdout
    stream.write(message)
    stream.flush()

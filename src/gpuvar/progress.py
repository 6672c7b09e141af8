"""How far the long step under way has come, for a person waiting on it.

Why: `gpuvar explain` of a big trace spends minutes in one stage (a 20 M-launch Nsight Systems export with API
calls: ~5 minutes of ingest) with nothing on the console, which reads as a hang. The loops that take that long
say here where they are (`start` a step, `at` a count), at the cost of an attribute write per batch; whoever
shows progress reads `current()` from another thread (explain's heartbeat, gpuvar.explain.Heartbeat), so a
stage never prints or times anything itself. A step is per process: a stage run in a process of its own reports
nothing to explain's console. Every command logs its step once a minute (gpuvar.cli: a Slurm job's log says how
far a 10-minute ingest has come).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass
class Step:
    """What is being done, how much of it (`done` of `total` `unit`), None where the total is unknown."""

    what: str
    total: float | None = None
    unit: str = ""
    done: float = 0

    def line(self) -> str:
        """'writing the canonical tables: 42 % (8.4 M of 20 M kernel rows)'; without a total, how many so far."""
        if not self.total or self.total <= 0:
            return f"{self.what}: {_amount(self.done, self.unit)} so far" if self.done else self.what
        share = min(1.0, max(0.0, self.done / self.total))
        done = _amount(self.done, self.unit if self.unit == "bytes" else "")  # ('8.4 M of 20 M kernel rows')
        return f"{self.what}: {100 * share:.0f} % ({done} of {_amount(self.total, self.unit)})"


def _amount(value: float, unit: str) -> str:
    if unit == "bytes":
        for size, suffix in ((1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "kB")):
            if value >= size:
                return f"{value / size:.3g} {suffix}"
        return f"{value:.0f} bytes"
    for size, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if value >= size:
            return f"{value / size:.3g}{suffix} {unit}".rstrip()
    return f"{value:.0f} {unit}".rstrip()


_lock = threading.Lock()
_current: Step | None = None


def start(what: str, total: float | None = None, unit: str = "") -> Step:
    """A new step of the work under way (it replaces the one before); returns it, whose `done` the loop sets."""
    global _current
    step = Step(what, total, unit)
    with _lock:
        _current = step
    return step


def at(step: Step | None, done: float) -> None:
    """Where `step` has come to (a step of None: nothing to say)."""
    if step is not None:
        step.done = done


def finish() -> None:
    """No step under way (the stage is done)."""
    global _current
    with _lock:
        _current = None


def current() -> Step | None:
    """The step under way, None when none is."""
    with _lock:
        return _current


class Heartbeat:
    """Every `every` seconds, say(the step under way's line) while the `with` block runs (nothing while no step is
    under way); no step is left under way after it."""

    def __init__(self, say, every: float):
        self.say, self.every = say, every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="gpuvar-heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self.stop.wait(self.every):
            step = current()
            if step is not None:
                self.say(step.line())

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        finish()

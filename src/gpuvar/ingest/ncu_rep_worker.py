"""Child process of the .ncu-rep reader: load a report with the ncu-report package, pickle its launches.

Run as a script (`python ncu_rep_worker.py REPORT OUTPUT`), apart from the reader's process, because the
package's native parser can abort the whole interpreter on a damaged report (found by fuzzing: SIGABRT in
load_report) and logs damage straight to file descriptor 2. Self-contained on purpose: importing nothing
from gpuvar keeps the child's start-up to the package's own import.

OUTPUT receives a pickled dict: {"launches": {...}} (column-oriented, see Launches.result), or
{"missing_package": True}, or {"error": message} for an exception the package raised.
"""

from __future__ import annotations

import pickle
import sys


def _text(value):
    """Text from the package as valid UTF-8: a damaged report yields undecodable bytes (lone surrogates)."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return value


class Launches:
    """Every action of a report, in report order, kept column-oriented (a report holds ~1000 metrics per launch
    and may hold thousands of launches)."""

    def __init__(self):
        self.total = 0  # actions seen, readable or not
        self.ids: list[int] = []  # position of each readable action in the report (ncu's ID)
        self.names: list[str] = []
        self.workloads: list[int] = []
        self.values: dict[str, list] = {}  # metric -> value per readable action (None: no value / not held)
        self.units: dict[str, list] = {}  # metric -> unit per readable action (None: the action lacks it)
        self.damaged_metrics = 0

    def add(self, action) -> None:
        """One action; a record without name and metrics (or whose name or list cannot be read) is damaged."""
        position = self.total
        self.total += 1
        try:
            names = list(action.metric_names())
            name = _text(action.name(action.NameBase_DEMANGLED) or action.name())
            workload = action.workload_type()
        except Exception:  # noqa: BLE001 - a damaged record makes the SWIG layer raise anything
            return
        if not name and not names:
            return
        held = {}
        for metric_name in names:
            try:
                metric = action.metric_by_name(metric_name)
                value = metric.value() if metric.has_value() else None
                held[_text(metric_name)] = (_text(value), _text(metric.unit()) or "")
            except Exception:  # noqa: BLE001 - e.g. a damaged name the package cannot look up
                self.damaged_metrics += 1
        row = len(self.ids)
        self.ids.append(position)
        self.names.append(name)
        self.workloads.append(workload)
        for key, (value, unit) in held.items():
            if key not in self.values:
                self.values[key], self.units[key] = [None] * row, [None] * row
            self.values[key].append(value)
            self.units[key].append(unit)
        for key, column in self.values.items():
            if len(column) == row:
                column.append(None)
                self.units[key].append(None)

    def result(self) -> dict:
        return {
            "total": self.total,
            "ids": self.ids,
            "names": self.names,
            "workloads": self.workloads,
            "values": self.values,
            "units": self.units,
            "damaged_metrics": self.damaged_metrics,
        }


def extract(report_path: str) -> dict:
    import ncu_report

    report = ncu_report.load_report(report_path)
    launches = Launches()
    for r in range(report.num_ranges()):
        rng = report.range_by_idx(r)
        for a in range(rng.num_actions()):
            try:
                action = rng.action_by_idx(a)
            except Exception:  # noqa: BLE001
                launches.total += 1
                continue
            launches.add(action)
    return launches.result()


def main(argv: list[str]) -> int:
    report_path, output = argv
    try:
        result = {"launches": extract(report_path)}
    except ImportError:
        result = {"missing_package": True}
    except Exception as exc:  # noqa: BLE001 - the package's own errors (missing file, unreadable report)
        result = {"error": " ".join(str(exc).split()) or type(exc).__name__}
    with open(output, "wb") as fh:
        pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

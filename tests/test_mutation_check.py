"""tools/mutation_check.py stays true to the code: every mutation's text is in the current source (a stale one
made the tool report a mutation it never applied), and a stale mutation stops the tool before any test run.
Cheap (no test run): the mutation run itself is `make mutation`."""

from __future__ import annotations

import importlib.util

import pytest
from conftest import REPO


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("mutation_check", REPO / "tools" / "mutation_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_mutation_applies_to_the_current_code(tool):
    assert tool.stale(tool.MUTATIONS) == []
    for name, (path, original, mutated, tests, _) in tool.MUTATIONS.items():
        assert (REPO / path).read_text().count(original) >= 1 and original != mutated, name
        for test in tests:
            assert (REPO / test.split("::")[0]).is_file(), (name, test)


def test_a_stale_mutation_stops_the_tool_before_running_tests(tool, monkeypatch, capsys):
    path, original, mutated, tests, what = tool.MUTATIONS["stats_ddof"]
    monkeypatch.setitem(tool.MUTATIONS, "stats_ddof", (path, original + " # gone", mutated, tests, what))
    monkeypatch.setattr(tool, "run_tests", lambda *a, **k: pytest.fail("no test may run"))
    monkeypatch.setattr("sys.argv", ["mutation_check.py", "stats_ddof"])
    assert tool.main() == 2
    assert "stale mutation stats_ddof: src/gpuvar/binning/stats.py no longer contains" in capsys.readouterr().err


def test_a_failing_baseline_stops_the_tool(tool, monkeypatch, capsys):
    runs = []

    def baseline_fails(name, tests, timeout, mutation):
        runs.append(name)
        return "FAILED", 0.0, "1 failed"

    monkeypatch.setattr(tool, "run_tests", baseline_fails)
    monkeypatch.setattr("sys.argv", ["mutation_check.py", "stats_ddof"])
    assert tool.main() == 1
    assert runs == ["baseline"] and "fail without any mutation" in capsys.readouterr().err

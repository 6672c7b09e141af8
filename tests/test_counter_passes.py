"""Counter passes joined to their kernel trace (issue 36 item 3; gpuvar.ingest.counter_passes).

rocprof v1 counter passes and rocprofv3 counter_collection carry counters but no timing. Given with their kernel
trace (several files, a folder, a config list) each pass joins its dispatch by Index (v1) or Dispatch_Id (v3),
the kernel names checked; a pass alone exits 2 asking for the trace. Checked on the real files
(hpct-laplacian: results.csv + data_movement.csv from two runs; omniperf2022 passes; rocprofv3 vectorops) and on
a planted trace with two passes whose only cause of the stencil's duration is a counter (FETCH_SIZE)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import real_file

from gpuvar.causal.roles import counter_kind
from gpuvar.demo.planted_counter_passes import write_counter_passes
from gpuvar.errors import InputError
from gpuvar.ingest import ingest, normalize_trace, read_source
from gpuvar.ingest.counter_passes import group_files, is_counter_pass
from gpuvar.ingest.raw import roundtrip

LAPLACE1 = "rocprof-v1-csv/hpct-laplacian-kernel1-mi250x"
LAPLACE3 = "rocprof-v1-csv/hpct-laplacian-kernel3-mi250x"
PERPASS = "rocprof-v1-csv/omniperf2022-mixbench-mi100-perpass"
V3 = "rocprofv3-csv/rocprofiler-sdk-docs-vectorops-newer"
COUNTER_ONLY = (
    "launches read, no timing columns: give it together with its kernel trace (results.csv / kernel_trace.csv)"
)


def _ingested(folder):
    return pd.read_parquet(folder / "kernels.parquet"), json.loads((folder / "ingest.json").read_text())


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return write_counter_passes(tmp_path_factory.mktemp("passes"), iterations=200, seed=1)


# ------------------------------------------------------------------------------------------- real files
def test_real_trace_and_pass_of_another_run_join_by_index(tmp_path, run_cli):
    results, movement = real_file(f"{LAPLACE1}/results.csv"), real_file(f"{LAPLACE1}/data_movement.csv")
    trace, counters = pd.read_csv(results), pd.read_csv(movement)
    assert set(trace["pid"]) != set(counters["pid"])  # two runs of the program: only the dispatch order joins
    proc = run_cli("ingest", results, movement, "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    k, report = _ingested(tmp_path / "out")
    assert len(k) == len(trace) == 1004 and report["tables"]["kernels"]["rows_read"] == 1004
    k = k.set_index("launch_id")
    for name in ("FETCH_SIZE", "WRITE_SIZE", "TCP_TOTAL_CACHE_ACCESSES_sum", "TCP_TCC_READ_REQ_sum"):
        assert k[name].notna().all(), name  # every launch keeps its counters
        assert np.allclose(k[name].to_numpy(), counters.set_index("Index").loc[k.index, name].to_numpy())
    assert (k["duration"].to_numpy() == trace.set_index("Index").loc[k.index, "DurationNs"].to_numpy()).all()
    (record,) = report["counter_passes"]
    assert record == {
        "file": "data_movement.csv",
        "key": "Index",
        "launches": 1004,
        "joined": 1004,
        "unmatched": 0,
        "other_launch_config": 0,
        "counters": ["FETCH_SIZE", "WRITE_SIZE", "TCP_TOTAL_CACHE_ACCESSES_sum", "TCP_TCC_READ_REQ_sum",
                     "TCP_TCC_WRITE_REQ_sum"],
    }  # fmt: skip
    assert report["source"] == str(results)
    assert {counter_kind(c) for c in record["counters"]} == {"work"}  # traffic: allowed findings drivers


def test_real_folder_is_the_trace_with_its_pass(tmp_path):
    ingest(real_file(LAPLACE1), tmp_path / "out")
    k, report = _ingested(tmp_path / "out")
    assert len(k) == 1004 and k["FETCH_SIZE"].notna().all() and k["duration"].notna().all()
    assert [p["file"] for p in report["counter_passes"]] == ["data_movement.csv"]


def test_real_pass_of_another_input_is_counted_not_refused(tmp_path):
    # kernel3's pass: the same kernels in the same order, on an 8x smaller grid (another build of the program)
    ingest([real_file(f"{LAPLACE1}/results.csv"), real_file(f"{LAPLACE3}/data_movement.csv")], tmp_path / "out")
    _, report = _ingested(tmp_path / "out")
    (record,) = report["counter_passes"]
    assert record["joined"] == 1004 and record["other_launch_config"] == 1001  # the 1001 laplacian launches
    assert any("ran another grid or block" in n for n in report["notes"])


def test_real_rocm4_passes_folder_joins_the_second_pass_onto_the_first(tmp_path):
    folder = real_file(PERPASS)
    ingest(folder, tmp_path / "out")
    k, report = _ingested(tmp_path / "out")
    first, second = pd.read_csv(folder / "SQ_INST_LEVEL_VMEM.csv"), pd.read_csv(folder / "SQ_LEVEL_WAVES.csv")
    assert len(k) == 167 and (k["duration"].to_numpy() == (first["EndNs"] - first["BeginNs"]).to_numpy()).all()
    (record,) = report["counter_passes"]
    assert record["file"] == "SQ_LEVEL_WAVES.csv" and record["joined"] == 167
    # a counter in both passes keeps both values: the second under <name>_pass1, classified like the name
    assert (k["SQ_ACCUM_PREV_HIRES"].to_numpy() == first["SQ_ACCUM_PREV_HIRES"].to_numpy()).all()
    assert (k["SQ_ACCUM_PREV_HIRES_pass1"].to_numpy() == second["SQ_ACCUM_PREV_HIRES"].to_numpy()).all()
    assert counter_kind("SQ_ACCUM_PREV_HIRES_pass1") == counter_kind("SQ_ACCUM_PREV_HIRES") == "time"
    assert (k["sq_waves"].to_numpy() == second["SQ_WAVES"].to_numpy()).all() and counter_kind("sq_waves") == "work"
    assert any("timestamps are not used" in n for n in report["notes"])


def test_real_rocprofv3_trace_and_counter_collection_given_as_two_files(tmp_path, run_cli):
    folder = real_file(V3)
    proc = run_cli("ingest", folder / "kernel_trace.csv", folder / "counter_collection.csv", "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    k, report = _ingested(tmp_path / "out")
    assert len(k) == 8
    k = k.set_index("launch_id")
    assert (k.loc[1:4, "sq_waves"] == 16384).all() and k.loc[5:8, "sq_waves"].isna().all()
    (record,) = report["counter_passes"]
    assert (record["key"], record["launches"], record["joined"], record["unmatched"]) == ("Dispatch_Id", 4, 4, 0)


def test_counter_only_files_exit_2_and_ask_for_the_kernel_trace(tmp_path, run_cli):
    movement = real_file(f"{LAPLACE1}/data_movement.csv")
    for command in ("ingest", "explain"):
        proc = run_cli(command, movement, "-o", tmp_path / command)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines()[-1] == f"gpuvar {command}: error: {movement}: 1004 {COUNTER_ONLY}"
    # an older rocprofv3 counter_collection without timestamps
    cc = pd.read_csv(real_file(f"{V3}/counter_collection.csv")).drop(columns=["Start_Timestamp", "End_Timestamp"])
    cc.to_csv(tmp_path / "counter_collection.csv", index=False)
    proc = run_cli("ingest", tmp_path / "counter_collection.csv", "-o", tmp_path / "v3")
    assert proc.returncode == 2 and proc.stderr.strip().endswith(f"counter_collection.csv: 4 {COUNTER_ONLY}")


# ------------------------------------------------------------------------------------------- planted
def test_planted_trace_plus_two_passes_keep_every_counter(planted, tmp_path):
    ingest([planted["trace"], *planted["passes"]], tmp_path / "out")
    k, report = _ingested(tmp_path / "out")
    assert len(k) == planted["launches"] == 401
    for name in ("FETCH_SIZE", "WRITE_SIZE", "TCP_TCC_READ_REQ_sum", "sq_waves"):
        assert k[name].notna().all(), name
    k = k.sort_values("launch_id")
    assert np.allclose(k["FETCH_SIZE"].to_numpy(), planted["fetch_kb"], rtol=0.05)
    assert (k["duration"].to_numpy() == planted["duration"]).all()
    assert [(p["file"], p["joined"], len(p["counters"])) for p in report["counter_passes"]] == [
        ("pass1.csv", 401, 2),
        ("pass2.csv", 401, 2),
    ]


def test_planted_counter_is_named_as_the_cause(planted, tmp_path, run_cli):
    proc = run_cli("explain", planted["trace"], *planted["passes"], "-o", tmp_path / "out", "--no-causal")
    assert proc.returncode == 0, proc.stderr
    assert "ranks" not in proc.stdout  # one trace with its passes, not three ranks
    record = json.loads((tmp_path / "out" / "findings" / "findings.json").read_text())
    (dataset,) = record["datasets"]
    top = next(f for f in dataset["findings"] if f["kernel"] == planted["kernel"])
    assert top["verdict"]["verdict"] == "explained" and top["shares"]["counters"] > 0.95
    assert (top["drivers"][0]["feature"], top["drivers"][0]["sign"]) == (planted["cause"], 1)


def test_pass_of_another_program_is_a_one_line_error(planted, tmp_path, run_cli):
    bad = tmp_path / "pass2.csv"
    text = open(planted["passes"][1]).read().replace('"check_kernel"', '"reduce_kernel"', 1)
    bad.write_text(text)
    with pytest.raises(InputError, match=r"pass2\.csv: Index 2 is 'reduce_kernel' here but 'check_kernel'"):
        normalize_trace(read_source([planted["trace"], planted["passes"][0], bad]))
    proc = run_cli("ingest", planted["trace"], bad, "-o", tmp_path / "out")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_read_then_normalize_equals_ingest(planted, tmp_path):
    files = [planted["trace"], *planted["passes"]]
    one = normalize_trace(read_source(files))
    two = normalize_trace(roundtrip(read_source(files), tmp_path / "raw"))
    assert one[1].equals(two[1]) and one[0].counter_passes == two[0].counter_passes


def test_explain_groups_a_trace_with_its_passes_and_keeps_ranks_apart(planted):
    assert is_counter_pass(planted["passes"][0]) and not is_counter_pass(planted["trace"])
    files = [planted["trace"], *planted["passes"]]
    assert [[str(f) for f in group] for group in group_files(files)] == [[str(f) for f in files]]
    traces = [real_file(f"{LAPLACE1}/results.csv"), real_file(f"{LAPLACE3}/results.csv")]
    assert len(group_files(traces)) == 2  # two kernel traces: the ranks of a job


def test_several_files_of_other_formats_are_refused_in_one_line(tmp_path):
    v3 = real_file(f"{V3}/kernel_trace.csv")
    with pytest.raises(InputError, match="only a rocprof or rocprofv3 kernel trace with its counter passes"):
        read_source([real_file(f"{LAPLACE1}/results.csv"), v3])

"""Nsight Systems .nsys-rep: exported once with nsys (a fake nsys on PATH here), the export cached beside the
ingest output and reused; without nsys, one line with the exact export command."""

from __future__ import annotations

import os
import stat
import sys
import time

import pytest
from conftest import real_file

from gpuvar.errors import InputError
from gpuvar.ingest import ingest
from gpuvar.ingest.detect import detect

NSYS = "nsys-sqlite/nsys-ai-mock-rtx3080/mock.sqlite"
FAKE_NSYS = """#!{python}
import shutil, sys
args = sys.argv[1:]
with open({log!r}, "a") as fh:
    fh.write(" ".join(args) + "\\n")
assert args[:4] == ["export", "--type", "sqlite", "--output"], args
shutil.copyfile({sqlite!r}, args[4])
"""


@pytest.fixture
def report(tmp_path):
    path = tmp_path / "run 1.nsys-rep"  # a space: the command is an argument list, never a shell string
    path.write_bytes(b"\x00\x01NSYS-REPORT-LIKE\x00" * 64)
    return path


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    bindir, log = tmp_path / "bin", tmp_path / "nsys.log"
    bindir.mkdir()
    script = bindir / "nsys"
    script.write_text(FAKE_NSYS.format(python=sys.executable, log=str(log), sqlite=str(real_file(NSYS))))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_report_without_nsys_names_the_export_command(report, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert detect(report).FORMAT == "nsys-rep"
    with pytest.raises(InputError) as err:
        ingest(report, tmp_path / "out")
    expected = f"nsys export --type sqlite --output {tmp_path / 'run 1.sqlite'} {report}"
    assert f"`{expected}`" in str(err.value) and "nsys is not on PATH" in str(err.value)
    assert str(err.value).startswith(str(report)) and "\n" not in str(err.value)


def test_report_is_exported_once_and_the_export_reused(report, fake_nsys, tmp_path):
    out = tmp_path / "out"
    first = ingest(report, out)
    reference = ingest(real_file(NSYS), tmp_path / "ref")
    assert first["format"] == "nsys-rep"
    assert first["tables"]["kernels"]["rows_written"] == reference["tables"]["kernels"]["rows_written"] > 0
    assert (out / "run 1.nsys-rep.sqlite").exists()
    assert len(fake_nsys.read_text().splitlines()) == 1
    second = ingest(report, out)
    assert len(fake_nsys.read_text().splitlines()) == 1  # cached export reused
    assert "cached export reused" in second["notes"][0]
    assert second["tables"] == first["tables"]


def test_a_newer_report_is_exported_again(report, fake_nsys, tmp_path):
    out = tmp_path / "out"
    ingest(report, out)
    later = time.time() + 10
    os.utime(report, (later, later))
    ingest(report, out)
    assert len(fake_nsys.read_text().splitlines()) == 2


def test_failed_export_is_one_line(report, tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nsys"
    script.write_text("#!/bin/sh\necho 'Error: unsupported report version' >&2\nexit 3\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    with pytest.raises(InputError, match=r"nsys export failed \(exit 3\): Error: unsupported report version"):
        ingest(report, tmp_path / "out")
    assert not list((tmp_path / "out").glob("*.sqlite"))


def test_other_content_named_nsys_rep_is_read_by_content(tmp_path):
    sqlite = tmp_path / "really.nsys-rep"
    sqlite.write_bytes(real_file(NSYS).read_bytes())
    assert detect(sqlite).FORMAT == "nsys-sqlite"

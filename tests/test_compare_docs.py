"""docs/compare.md's "Real pairs" claims reproduce with its own commands: the test runs the documented block as a
user would (bash, the `gpuvar` command) and checks each claim against the outputs, and that the doc states it.
Skipped when the real files are absent (required in CI)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import real_file

# every test reads the comparisons of real recordings made once (~35 s): in `make test`, not `make test-fast`
pytestmark = pytest.mark.long

DOC = Path(__file__).resolve().parents[1] / "docs" / "compare.md"


def documented_block() -> str:
    text = DOC.read_text()
    block = re.search(r"<!-- reproduce: begin -->\s*```bash\n(.*?)```\s*<!-- reproduce: end -->", text, re.S)
    assert block, "docs/compare.md lost its reproducible command block"
    return block.group(1)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    real = real_file("nsys-sqlite").parent  # skips (or fails in CI) without the real files
    folder = tmp_path_factory.mktemp("compare_docs")
    env = {**os.environ, "GPUVAR_REAL_DATA": str(real), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", documented_block()], cwd=folder, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, done.stderr


def _read(folder: Path, name: str):
    record = json.loads((folder / "compare" / name / "compare.json").read_text())
    return record, pd.read_csv(folder / "compare" / name / "kernels.csv").set_index("key")


def _says(*fragments: str) -> None:
    text = " ".join(DOC.read_text().split())
    for fragment in fragments:
        assert fragment in text, f"docs/compare.md no longer says {fragment!r}"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:+.2f} ms".replace("-", "−")


def test_halves_of_one_recording(outputs):
    record, table = _read(outputs[0], "halves")
    s = record["summary"]
    assert (s["rows"], s["tested"], s["slower"], s["faster"]) == (13, 13, 0, 0)
    copy = table.loc["[memcpy DtoD]"]
    _says(
        "13 rows (11 kernels, the device-to-device copies, the memsets), all tested over steps, 0 slower, 0 faster",
        f"The run's Δ total is {_ms(s['delta_total_ns'])}",
        f"`[memcpy DtoD]` {_ms(copy['delta_total_ns'])}, of which {_ms(copy['delta_count_ns'])} is launch-count",
        f"×{copy['ratio']:.4f}",
    )


def test_planted_gelu_slowdown_and_the_pooled_short_name(outputs):
    record, table = _read(outputs[0], "gelu3")
    flagged = table[table["verdict"].isin(["slower", "faster"])]
    assert len(flagged) == 1 and flagged["verdict"].iloc[0] == "slower"
    gelu = flagged.iloc[0]
    _says(
        f"`{gelu['label']}` slower, ×{gelu['ratio']:.4f} [{gelu['ci_low']:.4f}, {gelu['ci_high']:.4f}], "
        f"{_ms(gelu['delta_total_ns'])}, with no hint"
    )
    assert pd.isna(gelu["hint"])
    short, _ = _read(outputs[0], "gelu3_short")
    assert short["summary"]["slower"] == 0
    _says("`vectorized_elementwise_kernel`) and nothing is flagged")


def test_mfu_before_after(outputs):
    record, table = _read(outputs[0], "mfu")
    s = record["summary"]
    assert (s["rows"], s["in_both"], s["tested"], s["slower"], s["faster"], s["negligible"]) == (29, 29, 29, 0, 0, 7)
    assert record["baseline"]["environment"]["resampling"] == {"count": 92, "steps": 17, "unit": "step"}
    negligible = table[table["verdict"] == "negligible"]
    gemms = negligible[negligible.index.str.startswith("nvjet_tst_192x")].sort_index()
    claims = [f"`{k}` ×{r['ratio']:.4f} [{r['ci_low']:.4f}, {r['ci_high']:.4f}]" for k, r in gemms.iterrows()]
    add = negligible.loc[negligible["ratio"] < 1].iloc[0]
    _says(
        f"| Δ total | {_ms(s['delta_total_ns'])} (×{s['total_time_ratio']:.3f})",
        f"(kernels {_ms(s['delta_kernel_ns'])}, copies {_ms(s['delta_copy_ns'])})",
        f"{len(negligible)} `negligible`",
        f"add kernel ×{add['ratio']:.4f} [{add['ci_low']:.4f}, {add['ci_high']:.4f}]",
        *claims,
    )
    finer, table1 = _read(outputs[0], "mfu_1pct")
    assert set(table1.index[table1["verdict"] == "slower"]) == set(gemms.index) and len(gemms) == 2
    assert list(table1.index[table1["verdict"] == "faster"]) == [add.name]
    flash = table.iloc[0]
    assert "flash_fwd_kernel" in flash.name and abs(flash["delta_count_ns"]) > 0.9 * abs(flash["delta_total_ns"])
    assert flash["verdict"] == "unchanged" and flash["ci_low"] > 1 and "q = 0.11" in flash["hint"]
    _says(
        f"`flash_fwd_kernel` {flash['delta_total_ns'] / 1e6:+.1f} ms".replace("-", "−"),
        f"×{flash['ratio']:.4f} [{flash['ci_low']:.4f}, {flash['ci_high']:.4f}] is `unchanged`",
    )


def test_nvfuser_pairs(outputs):
    same, _ = _read(outputs[0], "h200_vs_h200_run2")
    s = same["summary"]
    assert s["untested"] == s["rows"] == 16 and same["warnings"] == []
    _says("all 16 rows (15 kernels, the host copies) run 1–3 times and are `untested`", f"×{s['total_time_ratio']:.3f}")
    cross, table = _read(outputs[0], "h200_vs_h100")
    assert cross["warnings"][0] == "GPU models differ: h200 NVIDIA H200, h100 NVIDIA H100 80GB HBM3"
    share = re.search(r"only (\d+) % of the GPU time", cross["warnings"][1]).group(1)
    assert "warning: GPU models differ" in outputs[1]  # printed for the user too
    assert table.loc["nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT", "verdict"] == "removed"
    assert table.loc["nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN", "verdict"] == "added"
    _says(f"only {share} % of the GPU time", f"Total time ×{cross['summary']['total_time_ratio']:.3f}")

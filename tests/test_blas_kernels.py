"""gpuvar.blas_kernels: one OpenBLAS kernel path on every x86-64 machine with AVX2, so that the golden record and a
user's rerun elsewhere give the same bytes; a user's own OPENBLAS_CORETYPE and other CPUs are left alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuvar.blas_kernels import CORE_TYPE, cpu_flags, pin_blas_kernels


def test_pinned_where_unset_on_x86_with_avx2_and_fma():
    env = {}
    assert pin_blas_kernels(env, machine="x86_64", flags={"sse2", "avx2", "fma"}) == CORE_TYPE
    assert env == {"OPENBLAS_CORETYPE": CORE_TYPE}


@pytest.mark.parametrize(
    ("env", "machine", "flags"),
    [
        ({"OPENBLAS_CORETYPE": "Zen"}, "x86_64", {"avx2", "fma"}),  # the user's choice is kept
        ({}, "aarch64", {"asimd"}),  # OpenBLAS's own choice on ARM
        ({}, "x86_64", {"avx", "sse4_2"}),  # no AVX2: Haswell's kernels would not run
        ({}, "x86_64", set()),  # flags unknown (no /proc/cpuinfo)
    ],
)
def test_left_alone_otherwise(env, machine, flags):
    before = dict(env)
    assert pin_blas_kernels(env, machine=machine, flags=flags) is None
    assert env == before


def test_cpu_flags_reads_the_first_processor(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(str(info)) == {"fpu", "avx2", "fma"}
    assert cpu_flags(str(tmp_path / "missing")) == set()


@pytest.mark.skipif(not {"avx2", "fma"} <= cpu_flags(), reason="this CPU has no AVX2/FMA: nothing is pinned")
def test_a_gpuvar_process_runs_openblas_on_the_pinned_kernels():
    """What a workflow job or `gpuvar` command gets: importing gpuvar first, numpy's OpenBLAS loads Haswell's."""
    code = (
        "import os; os.environ.pop('OPENBLAS_CORETYPE', None)\n"
        "import gpuvar, numpy\n"
        "from threadpoolctl import threadpool_info\n"
        "print(*sorted({i.get('architecture') for i in threadpool_info() if i['internal_api'] == 'openblas'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [CORE_TYPE]

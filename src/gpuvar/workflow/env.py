"""The environment the workflow's rules run in."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def put_own_bin_first_on_path() -> None:
    """Rules run the `gpuvar` command of the environment Snakemake itself runs in, so `.venv/bin/snakemake ...`
    works as the README writes it, without activating the virtual environment first (the shell commands of
    the rules inherit this process's PATH)."""
    own = str(Path(sys.executable).parent)
    parts = os.environ.get("PATH", "").split(os.pathsep)
    if not parts or parts[0] != own:
        os.environ["PATH"] = os.pathsep.join([own, *[p for p in parts if p]])

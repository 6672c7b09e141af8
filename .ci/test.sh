#!/usr/bin/env bash
# The test suite behind `make test`: lint the workflow, then pytest (Slurm tests start their own cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
snakemake --lint
snakefmt --check Snakefile workflow/rules
pytest -q -m "not slow" --timeout=900 "$@"

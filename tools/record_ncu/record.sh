#!/usr/bin/env bash
# Record tests/data/recorded/h100-torch-ncu/ on a machine with an NVIDIA GPU, Nsight Compute and PyTorch.
# Usage: tools/record_ncu/record.sh OUTDIR [STEPS]
# One profiling run (ncu -o), exported twice from the same report: the long "details" CSV and the wide
# "--page raw" CSV, so both layouts describe the same launches; the report itself is kept as report.ncu-rep.xz
# (the .ncu-rep reader is tested against both exports). Clocks are not locked (--clock-control none) so the
# durations keep their natural run-to-run variation, which is what gpuvar studies.
set -euo pipefail
out=${1:?usage: record.sh OUTDIR [STEPS]}
steps=${2:-40}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
metrics=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread
metrics+=,launch__shared_mem_per_block_static,launch__shared_mem_per_block_dynamic,launch__waves_per_multiprocessor
metrics+=,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum
metrics+=,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active
ncu --version > "$out/ncu_version.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$out/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__)' >> "$out/gpu.txt"
report=$(mktemp -d)/workload
ncu --clock-control none --metrics "$metrics" -f -o "$report" python3 "$here/workload.py" --steps "$steps"
ncu --import "$report.ncu-rep" --csv > "$out/details.csv"
ncu --import "$report.ncu-rep" --csv --page raw > "$out/raw.csv"
xz -9 -c "$report.ncu-rep" > "$out/report.ncu-rep.xz"  # ~54 MB whatever the launches (the profiled binaries); xz: ~2.4 MB
echo "$metrics" | tr , '\n' > "$out/metrics_used.txt"
wc -l "$out"/*.csv

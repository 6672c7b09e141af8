#!/usr/bin/env bash
# Round-3 recordings with a designed cause (issue 34/37 validation), on the device machine: writes into $OUT.
# Each recording is independent; a failure is logged and the next runs.
set -u
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1
W=$(mktemp -d)
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log.txt"; }
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv >> "$OUT/log.txt" 2>&1
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' >> "$OUT/log.txt" 2>&1
ncu --version >> "$OUT/log.txt" 2>&1
# 1. two ranks on one GPU, rank 0 the variable (straggler) rank
log ranks; (cd "$W" && OUT="$W" VARIABLE_RANK=0 timeout 120 python3 "$here/ranks.py" 0 & cd "$W" && OUT="$W" VARIABLE_RANK=0 timeout 120 python3 "$here/ranks.py" 1; wait) >> "$OUT/log.txt" 2>&1
tar -C "$W" -cf "$OUT/ranks_var0.tar" ranks_var0 2>>"$OUT/log.txt"; log ranks done
# 2. the transformer block at L = 1024 without the copy (the re-run of fixedcontend with the copy removed)
log fixednocopy; (cd "$here" && OUT="$W" timeout 120 python3 -c "import record_traces as r; r.run('fixednocopy', 300, [1024]*300, [False]*300)") >> "$OUT/log.txt" 2>&1
tar -C "$W/traces" -cf "$OUT/fixednocopy.tar" fixednocopy 2>>"$OUT/log.txt"; log fixednocopy done
# 3. GPT-2 with input shapes (40 steps)
log gpt2shapes; OUT="$W" NAME=gpt2shapes STEPS=40 SEED=5 SHAPES=1 timeout 150 python3 "$here/gpt2.py" >> "$OUT/log.txt" 2>&1
tar -C "$W" -cf "$OUT/gpt2shapes.tar" gpt2shapes 2>>"$OUT/log.txt"; log gpt2shapes done
# 4. Nsight Compute, 360 launches (90 iterations), basic set: raw and details exports of one report
log ncu; (cd "$W" && ITERS=95 timeout 200 ncu --set basic --clock-control none -c 360 -f -o "$W/rs" python3 "$here/ncu_prog.py" && ncu --import "$W/rs.ncu-rep" --csv --page raw | gzip -9 -n > "$W/random_sizes_raw.csv.gz" && ncu --import "$W/rs.ncu-rep" --csv | gzip -9 -n > "$W/random_sizes_details.csv.gz") >> "$OUT/log.txt" 2>&1
tar -C "$W" -cf "$OUT/ncu.tar" random_sizes_raw.csv.gz random_sizes_details.csv.gz 2>>"$OUT/log.txt"; log ncu done
# 5. GPT-2 without shapes, 100 steps (~60 k launches)
log gpt2varlen; OUT="$W" NAME=gpt2varlen STEPS=100 SEED=3 timeout 150 python3 "$here/gpt2.py" >> "$OUT/log.txt" 2>&1
tar -C "$W" -cf "$OUT/gpt2varlen.tar" gpt2varlen 2>>"$OUT/log.txt"; log gpt2varlen done
ls -la "$OUT" >> "$OUT/log.txt"
# files come back at most 16 MiB each: split larger ones
for f in "$OUT"/*.tar; do s=$(stat -c %s "$f"); if [ "$s" -gt 16000000 ]; then split -b 15000000 -d "$f" "$f.part-" && rm "$f"; fi; done
ls -la "$OUT" >> "$OUT/log.txt"

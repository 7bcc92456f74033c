#!/usr/bin/env bash
# The 2026-11-30 captures shipped in traces/ (see traces/README.md). Run from the repository root
# on a CUDA machine:  bash traces/capture_h200.sh [DEST]   (DEST defaults to "traces").
# They were made with `python3 -m copyprof.capture.replica ...` (each run.json records that
# command); that entry point became `copyprof run --engine replica` with the same options
# and defaults (--steps given explicitly: the run command's default is 64), used below.
# Each command is independent: a failure is reported and the next one still runs.
set -uo pipefail
export PYTHONUNBUFFERED=1
DEST=${1:-traces}
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv || true
run() { echo "+ $*"; local t0=$SECONDS; "$@"; local rc=$?; echo "= rc=$rc in $((SECONDS - t0)) s"; }
# a. Kimi-K3 TP8 per-rank shapes, N = 16 and 24, both arms, CUDA graph, interleaved timing.
R="python3 -m copyprof run --engine replica"
run $R --model kimi-k3 --tp 8 --concurrency 16 --device cuda --arm both --steps 32 --out "$DEST"
run $R --model kimi-k3 --tp 8 --concurrency 24 --device cuda --arm both --steps 32 --out "$DEST"
# b. Kimi-Linear-48B-A3B TP8 (32 MLA heads and 32 KDA heads: 4 per rank), N = 16.
run $R --model kimi-linear-48b-a3b --tp 8 --concurrency 16 --device cuda --arm both --steps 32 --out "$DEST"
# c. Eager (no graph) baseline: Memcpy DtoD records with cudaMemcpyAsync runtime rows.
run $R --model kimi-linear-48b-a3b --tp 8 --concurrency 16 --device cuda --arm baseline --eager --steps 8 --out "$DEST"
# d. Plain D2D copies of known sizes, eager and in CUDA-graph replay.
# (made on 2026-11-30 with the former entry point `python3 -m copyprof.capture.replica_copies`, 4 replays)
run python3 -m copyprof run --engine copies --device cuda --steps 4 --out "$DEST"

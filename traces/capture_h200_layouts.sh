#!/usr/bin/env bash
# Captures of this folder made for issue 13 (layouts for any model) and issue 14 (copy sources),
# see traces/README.md. Run from the repository root on a CUDA machine:
#   bash traces/capture_h200_layouts.sh [DEST]   (DEST defaults to "traces")
# copyprof need not be installed: `python3 -m copyprof` runs from the checkout (torch, click,
# rich, pandas, numpy and msgspec must be importable). Each command is independent: a failure
# is reported and the next one still runs.
set -uo pipefail
export PYTHONUNBUFFERED=1
DEST=${1:-traces}
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv || true
run() { echo "+ $*"; local t0=$SECONDS; "$@"; local rc=$?; echo "= rc=$rc in $((SECONDS - t0)) s"; }
R="python3 -m copyprof run --engine replica --device cuda"
# a. Qwen3-Next-80B-A3B at TP4 (48 layers: 36 gated delta-net + 12 full attention), N = 16, CUDA
#    graph: baseline (every layer copies), partial (the 12 full-attention layers return directly),
#    candidate (no layer copies); interleaved timing of the three arms (40 rounds x 50 replays).
run $R --model qwen3-next-80b-a3b --tp 4 --concurrency 16 --arm both --remove full_attention --steps 32 --out "$DEST"
# b. The same step eagerly with Python stacks and shapes (the eager companion of a's baseline).
run $R --model qwen3-next-80b-a3b --tp 4 --concurrency 16 --arm baseline --eager --with-stack --record-shapes \
    --steps 8 --timing-blocks 0 --out "$DEST" --label replica-qwen3-next-80b-a3b-tp4-c16-eager-stacks
# c. Kimi-K3 TP8 N = 16: baseline and the MLA-only removal of vLLM #50847 (69 KDA copies left).
run $R --model kimi-k3 --tp 8 --concurrency 16 --arm baseline --remove mla --steps 32 --out "$DEST"

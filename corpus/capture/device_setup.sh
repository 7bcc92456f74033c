#!/bin/bash
# On the device, in the call that carries the last piece: install vLLM 0.26.0 (stage.sh), copyprof,
# the direct-return arm, then start the "structure" phase in its own session (it outlives the call).
#   bash corpus/capture/device_setup.sh
set -u
mkdir -p /root/stash && mv .vllm/piece.* /root/stash/ 2>/dev/null
. .vllm/stage.sh
[ -f /opt/vsite/.ok ] || { echo "setup: vLLM install failed"; exit 1; }
python3 -m pip install -q --no-deps --no-build-isolation --no-cache-dir --target /opt/cp . || { echo "setup: copyprof install failed"; exit 1; }
# The direct-return arm: a hard-linked copy of vLLM with the patched files replaced (not linked).
D=$PWD/corpus/patches/direct-return-kimi-olmo.diff
mkdir -p /opt/vdirect && cp -al /opt/vsite/vllm /opt/vdirect/vllm
for f in $(grep '^+++ ' "$D" | awk '{print $2}' | sed 's#^b/##'); do cp --remove-destination "/opt/vsite/$f" "/opt/vdirect/$f"; done
(patch -p1 -d /opt/vdirect < "$D" || (cd /opt/vdirect && git apply -p1 "$D")) || { echo "setup: patch failed"; exit 1; }
printf '#!/bin/sh\nexport PYTHONPATH=/opt/vdirect:/opt/vsite${PYTHONPATH:+:$PYTHONPATH}\nexec python3 "$@"\n' > /opt/vpy-direct
chmod +x /opt/vpy-direct
/opt/vpy-direct -c "import vllm, inspect; from vllm.model_executor.models import kimi_linear as k; print('direct arm:', vllm.__file__, 'output[:]' not in inspect.getsource(k))"
rm -rf /root/models && cp -r corpus/models /root/models && cp -r corpus/capture /root/capture
export PYTHONPATH=/opt/cp CORPUS_MODELS=/root/models CORPUS_OUT=/root/runs
mkdir -p /root/runs
setsid nohup python3 /root/capture/jobs.py "${1:-structure}" > /root/runs/pool-structure.console 2>&1 < /dev/null &
sleep 20; tail -5 /root/runs/*.console.log 2>/dev/null | tail -40; nvidia-smi --query-gpu=memory.used --format=csv

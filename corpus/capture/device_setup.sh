#!/bin/bash
# On the device, in the call that carries the last piece: install vLLM 0.26.0 (stage.sh), copyprof,
# the candidate arms, then start the "structure" phase in its own session (it outlives the call).
#   bash corpus/capture/device_setup.sh
set -u
mkdir -p /root/stash && mv .vllm/piece.* /root/stash/ 2>/dev/null
. .vllm/stage.sh
[ -f /opt/vsite/.ok ] || { echo "setup: vLLM install failed"; exit 1; }
python3 -m pip install -q --no-deps --no-build-isolation --no-cache-dir --target /opt/cp . || { echo "setup: copyprof install failed"; exit 1; }
# Each candidate arm: a hard-linked copy of vLLM with the patched files replaced (not linked), and a
# python that sees it (/opt/vpy-NAME).
make_arm() {  # NAME PATCH
  local dir=/opt/v$1 D=$PWD/corpus/patches/$2
  rm -rf "$dir" && mkdir -p "$dir" && cp -al /opt/vsite/vllm "$dir/vllm"
  for f in $(grep '^+++ ' "$D" | awk '{print $2}' | sed 's#^b/##'); do cp --remove-destination "/opt/vsite/$f" "$dir/$f"; done
  (patch -p1 -d "$dir" < "$D" || (cd "$dir" && git apply -p1 "$D")) || { echo "setup: patch $2 failed"; exit 1; }
  printf '#!/bin/sh\nexport PYTHONPATH=%s:/opt/vsite${PYTHONPATH:+:$PYTHONPATH}\nexec python3 "$@"\n' "$dir" > /opt/vpy-$1
  chmod +x /opt/vpy-$1
}
make_arm direct direct-return-kimi-olmo.diff
make_arm mamba direct-return-jamba-mamba.diff
make_arm moe moe-output-alias.diff
/opt/vpy-direct -c "import vllm, inspect; from vllm.model_executor.models import kimi_linear as k; print('direct arm:', vllm.__file__, 'output[:]' not in inspect.getsource(k))"
/opt/vpy-mamba -c "import vllm, inspect; from vllm.model_executor.layers.mamba import mamba_mixer as m; print('mamba arm:', vllm.__file__, 'output[:num_actual_tokens] = out\n        return' in inspect.getsource(m))"
/opt/vpy-moe -c "import vllm, inspect; from vllm.model_executor.layers.fused_moe import modular_kernel as m; print('moe arm:', vllm.__file__, 'rocm_aiter_ops.is_fused_moe_enabled()' not in inspect.getsource(m))"
rm -rf /root/models && cp -r corpus/models /root/models && cp -r corpus/capture /root/capture
export PYTHONPATH=/opt/cp CORPUS_MODELS=/root/models CORPUS_OUT=/root/runs
mkdir -p /root/runs
setsid nohup python3 /root/capture/jobs.py "${1:-structure}" > /root/runs/pool-structure.console 2>&1 < /dev/null &
sleep 20; tail -5 /root/runs/*.console.log 2>/dev/null | tail -40; nvidia-smi --query-gpu=memory.used --format=csv

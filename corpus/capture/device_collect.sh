#!/bin/bash
# On the device: wait, say how the captures stand, and put up to 7 finished run directories
# (one tar each; parts of 15 MB when larger) under $OUT. Runs already sent are listed in /root/sent.
#   bash corpus/capture/device_collect.sh SECONDS_TO_WAIT [start-timing]
sleep "${1:-0}"
R=/root/runs; touch /root/sent
if [ -n "${2:-}" ]; then
  export PYTHONPATH=/opt/cp CORPUS_MODELS=/root/models CORPUS_OUT=$R
  export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false
  cp corpus/capture/jobs.py /root/capture/jobs.py
  setsid nohup python3 /root/capture/jobs.py "$2" > $R/pool-$2.console 2>&1 < /dev/null &
  echo "phase $2 started"
fi
cat $R/pool-*.jsonl 2>/dev/null | python3 -c "
import sys, json
for l in sys.stdin:
    e = json.loads(l)
    if e['event'] != 'start': print(e['event'], e.get('label', e.get('phase')), e.get('rc', ''), e.get('wall_s', ''))
"
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader; uptime
n=0
for d in $R/*/; do
  name=$(basename "$d"); [ -f "$d/run.json" ] || continue
  grep -qx "$name" /root/sent && continue
  st=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('status',''))" "$d/run.json")
  case "$st" in complete|failed*) ;; *) echo "running: $name ($st)"; continue;; esac
  [ $n -ge 7 ] && { echo "more to send: $name"; continue; }
  tar cf /tmp/$name.tar -C $R "$name" "$name.console.log" 2>/dev/null || tar cf /tmp/$name.tar -C $R "$name"
  if [ $(stat -c %s /tmp/$name.tar) -gt 15000000 ]; then
    split -b 15000000 -d /tmp/$name.tar $OUT/$name.tar.part; n=$((n + $(ls $OUT/$name.tar.part* | wc -l)))
  else mv /tmp/$name.tar $OUT/; n=$((n+1)); fi
  echo "$name" >> /root/sent; echo "sent: $name ($st)"
done
cp $R/pool-*.jsonl $OUT/ 2>/dev/null | true
for f in $R/*.console.log; do echo "== $(basename $f)"; tail -2 "$f"; done 2>/dev/null | tail -60

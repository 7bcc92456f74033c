#!/bin/bash
# The device tool carries the whole working tree (at most 64 MiB a call, vLLM's pieces included);
# the trace folders alone are ~80 MB. Before a series of device calls, move them out of the tree;
# afterwards bring them back (git sees them deleted in between: commit nothing then).
#   bash corpus/capture/slim_tree.sh aside    # traces/ and corpus/runs/ -> ../copyprof-traces-aside/
#   bash corpus/capture/slim_tree.sh back
set -eu
cd "$(git rev-parse --show-toplevel)"
A=../copyprof-traces-aside
case "${1:-}" in
  aside) mkdir -p "$A/corpus"; mv traces "$A/traces"; mv corpus/runs "$A/corpus/runs"
         du -sh --exclude=.git --exclude=.vllm . ;;
  back)  mv "$A/traces" traces; mv "$A/corpus/runs" corpus/runs; rmdir "$A/corpus" "$A"; git status --short | head ;;
  *) echo "usage: slim_tree.sh aside|back" >&2; exit 2 ;;
esac

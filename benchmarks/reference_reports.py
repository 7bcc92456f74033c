"""Write the reference reports: every shipped run and public sample through `report` (and
`inspect`) in every format, so that two trees' outputs can be compared file by file.

    python benchmarks/reference_reports.py OUT_DIR [--tree PATH]   # PATH: a checkout (default: this one)
    diff -r OUT_A OUT_B

Why a script: a change to the read path or the analysis must leave these byte-identical, or
change them only where its note says. The inputs are fixed here, each run with `--no-cache`.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "sample_traces"))


def cases(tree: str) -> list[tuple[str, list[str]]]:
    traces = os.path.join(tree, "traces")
    runs = sorted(d for d in os.listdir(traces) if os.path.isdir(os.path.join(traces, d)))
    out: list[tuple[str, list[str]]] = []
    for d in runs:
        model = "qwen3-next-80b-a3b" if "qwen3-next" in d else ("kimi-linear-48b-a3b" if "kimi-linear" in d else "kimi-k3")
        path = os.path.join(traces, d)
        out.append((f"{d}.table", ["report", path, "--model", model]))
        out.append((f"{d}.json", ["report", path, "--model", model, "--format", "json"]))
        out.append((f"{d}.inspect.json", ["inspect", path, "--format", "json"]))
    pairs = [("replica-kimi-k3-tp8-c16-cuda-graph-baseline-20261130T042336Z",
              "replica-kimi-k3-tp8-c16-cuda-graph-candidate-20261130T042336Z", "kimi-k3"),
             ("replica-qwen3-next-80b-a3b-tp4-c16-cuda-graph-baseline-20261201T083031Z",
              "replica-qwen3-next-80b-a3b-tp4-c16-cuda-graph-partial-20261201T083031Z", "qwen3-next-80b-a3b"),
             ("replica-kimi-linear-48b-a3b-tp8-c16-cuda-graph-baseline-20261130T042708Z",
              "replica-kimi-linear-48b-a3b-tp8-c16-cuda-graph-candidate-20261130T042708Z", "kimi-linear-48b-a3b")]
    for a, b, model in pairs:
        for fmt in ("table", "json", "markdown", "csv"):
            out.append((f"ab-{a[:40]}.{fmt}", ["report", os.path.join(traces, a), os.path.join(traces, b),
                                               "--model", model, "--format", fmt]))
    out.extend(corpus_cases(tree))
    if os.path.isdir(SHARED):
        for f in sorted(os.listdir(SHARED)):
            if f.endswith(".md"):
                continue
            path = os.path.join(SHARED, f)
            out.append((f"sample-{f}.table", ["report", path]))
            out.append((f"sample-{f}.json", ["report", path, "--format", "json"]))
            out.append((f"sample-{f}.k3.json", ["report", path, "--format", "json", "--model", "kimi-k3"]))
    return out


def corpus_cases(tree: str) -> list[tuple[str, list[str]]]:
    """Every real vLLM capture of corpus/ alone, and its A/B pairs, ABBA and A/A as the tests read them."""
    import json

    index = os.path.join(tree, "corpus", "runs.json")
    if not os.path.isfile(index):
        return []
    runs = json.load(open(index, encoding="utf-8"))["runs"]
    path = {r["name"]: os.path.join(tree, "corpus", "runs", r["name"]) for r in runs}
    model = {r["name"]: os.path.join(tree, "corpus", "models", r["model"]) for r in runs}
    out: list[tuple[str, list[str]]] = []
    for r in runs:
        n = r["name"]
        out.append((f"corpus-{n}.json", ["report", path[n], "--model", model[n], "--format", "json"]))
    named = sorted(path)

    def one(prefix: str) -> list[str]:
        return [n for n in named if n.startswith(prefix)]
    for mode in ("eager", "graph"):
        for shape in ("kimi-linear-12l-c16", "olmo-hybrid-8l-c16"):
            base, cand = one(f"{shape}-{mode}-baseline"), one(f"{shape}-{mode}-direct")
            if base and cand:
                for fmt in ("table", "json", "markdown"):
                    out.append((f"corpus-ab-{shape}-{mode}.{fmt}",
                                ["report", path[base[0]], path[cand[0]], "--model", model[base[0]], "--format", fmt]))
    abba_b, abba_c = one("olmo-hybrid-8l-c16-graph-abba-baseline"), one("olmo-hybrid-8l-c16-graph-abba-direct")
    if abba_b and abba_c:
        argv = ["report", "--baseline", *[path[n] for n in abba_b], "--candidate", *[path[n] for n in abba_c],
                "--model", model[abba_b[0]]]
        out += [(f"corpus-abba.{fmt}", [*argv, "--format", fmt]) for fmt in ("table", "json", "markdown")]
    aa = one("qwen3-8l-c24-graph-aa")
    if len(aa) >= 2:
        argv = ["report", "--aa", *[path[n] for n in aa], "--model", model[aa[0]]]
        out += [(f"corpus-aa.{fmt}", [*argv, "--format", fmt]) for fmt in ("table", "json")]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tree", default=os.path.dirname(HERE))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=args.tree, COLUMNS="200")
    for name, argv in cases(args.tree):
        res = subprocess.run([sys.executable, "-m", "copyprof", *argv, "--no-cache"], capture_output=True, text=True,
                             env=env, cwd=args.tree, timeout=600)
        text = res.stdout.replace(args.tree, "<tree>") + (f"\n[stderr]\n{res.stderr}" if res.stderr else "") + \
            f"\n[exit {res.returncode}]\n"
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as fh:
            fh.write(text)
    print(f"{len(cases(args.tree))} reports in {args.out}")


if __name__ == "__main__":
    main()

"""Per-step census of device-to-device copies, and attribution of post-projection copies.

A post-attention-projection copy is the `[N, hidden] x dtype` copy each decoder layer makes
when an attention module writes into a caller-owned buffer (`output[:] = o_proj(x)`). In a
step, the k-th such copy belongs to the k-th layer, whose kind (MLA/KDA) comes from the
layout (vllm-and-kimi.md §4.3, §12.2). When the count is not the layer count we say so and do
not attribute. Same-size copies right before an all-reduce kernel are eager all-reduce
staging copies (custom all-reduce copies its input into the IPC buffer), not projections.
Anchor kernels (taxonomy/anchors.py) between consecutive copies cross-check the kinds.

Speed: the GPU ops of the counted steps are gathered once into numpy columns sorted by
(step, start) (analysis/step_ops.py); the per-step work touches only each step's copies
(about one per layer), never a per-step DataFrame, so a 2-million-event trace takes well
under a second here.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from copyprof.analysis.step_ops import StepOps, step_ops
from copyprof.analysis.steps import Steps
from copyprof.events import BYTES_SOURCES
from copyprof.models import ModelLayout
from copyprof.taxonomy.anchors import is_allreduce
from copyprof.taxonomy.copies import bytes_match

COPY_COLUMNS = ["step", "pos", "name", "bytes", "bytes_src", "start_ns", "dur_ns", "gap_ns", "site", "layer", "next_kernel"]


@dataclass
class Census:
    """Copies of the counted steps (one row per copy) and per-step figures."""

    copies: pd.DataFrame  # COPY_COLUMNS; site: mla | kda | post-proj | allreduce-staging | other
    per_step: pd.DataFrame  # one row per counted step
    attribution: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def take_census(events: pd.DataFrame, steps: Steps, layout: ModelLayout | None, *,
                cus: int | None = None, all_steps: bool = False) -> Census:
    table = steps.table if all_steps else steps.decode
    ops = step_ops(events, steps, table["step"].to_numpy(), cus)
    tokens = _tokens(table, ops, layout)
    step_ids, op_bounds, copy_bounds = ops.step_bounds()
    sites_all: list[str] = []
    layers_all: list[int] = []
    c_bytes, c_src = ops.c_bytes.copy(), ops.c_src.copy()
    pos = np.zeros(len(ops.c_pos), dtype=np.int64)
    per_step, verdicts = [], []
    for k, step_id in enumerate(step_ids.tolist()):
        c0, c1 = int(copy_bounds[k]), int(copy_bounds[k + 1])
        n_tok = tokens.get(step_id)
        sites, layers, verdict = _classify_step(ops, c0, c1, int(op_bounds[k]), layout, n_tok)
        verdicts.append(verdict)
        if verdict.get("method") == "neighbours" and n_tok:
            # Attributed by place, not size: the layout says what they must be; say so.
            implied = np.isin(np.asarray(sites, dtype=object), ["mla", "kda", "post-proj"]) & (c_bytes[c0:c1] < 0)
            c_bytes[c0:c1][implied] = layout.post_proj_bytes(n_tok)
            c_src[c0:c1][implied] = "layout"
        pos[c0:c1] = np.arange(c1 - c0)
        sites_all += sites
        layers_all += layers
        per_step.append(_step_figures(step_id, n_tok, np.asarray(sites, dtype=object),
                                      ops.c_dur[c0:c1], ops.c_gap[c0:c1]))
    copies = _copies_frame(ops, pos, c_bytes, c_src, sites_all, layers_all)
    ps = pd.DataFrame(per_step)
    if not ps.empty:
        ps = ps.merge(table[["step", "period_ns", "span_ns"]], on="step", how="left")
    census = Census(copies=copies, per_step=ps)
    census.attribution = _summarise_attribution(verdicts, layout)
    if layout is None:
        census.notes.append("attribution to MLA/KDA layers needs a model layout (--model)")
        hint = _layout_hint(copies, len(table))
        if hint:
            census.notes.append(hint)
    return census


def _copies_frame(ops: StepOps, pos: np.ndarray, nbytes: np.ndarray, src: np.ndarray,
                  sites: list[str], layers: list[int]) -> pd.DataFrame:
    frame = pd.DataFrame({
        "step": ops.c_step.astype(np.int64), "pos": pos,
        "name": pd.Categorical.from_codes(ops.c_code, categories=ops.categories) if len(ops.categories)
        else pd.Categorical([""] * len(pos)),
        "bytes": nbytes, "bytes_src": pd.Categorical(src, categories=BYTES_SOURCES),
        "start_ns": ops.c_start, "dur_ns": ops.c_dur, "gap_ns": ops.c_gap,
        "site": np.asarray(sites, dtype=object), "layer": np.asarray(layers, dtype=np.int64),
        "next_kernel": ops.c_next,
    })
    return frame[COPY_COLUMNS]


def _tokens(table: pd.DataFrame, ops: StepOps, layout: ModelLayout | None) -> dict[int, int | None]:
    out: dict[int, int | None] = {}
    for step_id, tok in zip(table["step"], table["tokens"]):
        out[int(step_id)] = None if pd.isna(tok) else int(tok)
    if layout is None or all(v is not None for v in out.values()):
        return out
    inferred = _infer_tokens(pd.DataFrame({"bytes": ops.c_bytes, "bytes_src": ops.c_src}), layout)
    return {k: (v if v is not None else inferred) for k, v in out.items()}


def _infer_tokens(copies: pd.DataFrame, layout: ModelLayout) -> int | None:
    """N whose [N, hidden] copy size is seen most often. Exact sizes (bytes == N*hidden*dtype)
    win over rocclr grid bounds, which a smaller copy of another site can also fit."""
    per_token = layout.hidden * layout.dtype_bytes
    exact: dict[int, int] = {}
    bound: dict[int, int] = {}
    for (nbytes, src), n in copies.groupby(["bytes", copies["bytes_src"].astype(str)]).size().items():
        if nbytes <= 0:
            continue
        if src != "grid-bound":
            if nbytes % per_token == 0:
                exact[nbytes // per_token] = exact.get(nbytes // per_token, 0) + n
            continue
        fits = [t for t in range(max(1, (nbytes - 8192) // per_token), nbytes // per_token + 1)
                if bytes_match(np.array([nbytes]), np.array(["grid-bound"]), t * per_token)[0]]
        if len(fits) == 1:
            votes = exact if fits[0] * per_token == nbytes else bound
            votes[fits[0]] = votes.get(fits[0], 0) + n
    for votes in (exact, bound):
        if votes:
            return max(votes, key=lambda t: (votes[t], t))
    return None


def _classify_step(ops: StepOps, c0: int, c1: int, op0: int, layout: ModelLayout | None,
                   n_tok: int | None) -> tuple[list[str], list[int], dict]:
    """Sites and layers of one step's copies (``c0:c1`` of the census's copy columns)."""
    n = c1 - c0
    sites = ["other"] * n
    layers = [-1] * n
    verdict: dict[str, object] = {"status": "no-layout"}
    if layout is None or n_tok is None:
        if layout is not None:
            verdict = {"status": "no-tokens"}
        return sites, layers, verdict
    nbytes = ops.c_bytes[c0:c1]
    nxt_kernel = ops.c_next[c0:c1]
    match = bytes_match(nbytes, ops.c_src[c0:c1], layout.post_proj_bytes(n_tok))
    method = "size"
    if not match.any() and (nbytes < 0).any():
        match = _match_by_neighbours(nbytes < 0, nxt_kernel, ops.c_prev[c0:c1], layout.layers)
        method = "neighbours"
    post_idx = []
    for i in np.flatnonzero(match).tolist():
        if is_allreduce(nxt_kernel[i]):
            sites[i] = "allreduce-staging"
        else:
            post_idx.append(i)
    if len(post_idx) != layout.layers:
        for i in post_idx:
            sites[i] = "post-proj"
        return sites, layers, {"status": "count-mismatch", "found": len(post_idx), "expected": layout.layers,
                               "method": method}
    anchors = ops.anchor_windows(op0, ops.c_pos[c0:c1][post_idx])
    agree = checked = 0
    for k, i in enumerate(post_idx):
        kind = layout.layer_kinds[k]
        sites[i], layers[i] = kind, k + 1
        if anchors[k]:
            checked += 1
            agree += anchors[k] == kind
    # Other copies: the layer they sit in (after copy k-1, up to copy k -> layer k).
    in_layer = (np.searchsorted(np.array(post_idx), np.arange(n), side="left") + 1).tolist()
    for i in range(n):
        if sites[i] in ("other", "allreduce-staging"):
            layers[i] = in_layer[i]
    return sites, layers, {"status": "ok", "checked": checked, "agree": agree, "method": method}


def _match_by_neighbours(unknown: np.ndarray, nxt: np.ndarray, prv: np.ndarray, layers: int) -> np.ndarray:
    """Size-less copies (graph-replayed rocclr blits in Kineto carry neither bytes nor grid):
    the post-projection copies are the one group of copies that share a neighbour kernel
    (next kernel, else previous kernel) and number exactly one per layer. In Kimi-K3 the copy
    is followed by the pre-MLP `_attn_res_kernel` in every layer; in Kimi-Linear by the
    post-attention norm; a KDA placement copy has other neighbours."""
    pairs = np.array([f"{a}|{b}" for a, b in zip(prv.tolist(), nxt.tolist())], dtype=object)
    for keys in (nxt, prv, pairs):
        counts: dict[str, int] = {}
        for key in keys[unknown].tolist():
            counts[key] = counts.get(key, 0) + 1
        hits = [k for k, c in counts.items() if c == layers and k not in ("", "|")]
        if len(hits) == 1:
            return unknown & (keys == hits[0])
    return np.zeros(len(unknown), dtype=bool)


def _step_figures(step_id: int, n_tok: int | None, site: np.ndarray, dur: np.ndarray, gap: np.ndarray) -> dict[str, object]:
    def ms(mask: np.ndarray) -> float:
        return float(dur[mask].sum()) / 1e6

    is_post = np.isin(site, ["mla", "kda"])
    return {
        "step": step_id, "tokens": n_tok, "copies": len(site), "other": int((~is_post).sum()),
        "post_mla": int((site == "mla").sum()), "post_kda": int((site == "kda").sum()),
        "post_total": int(is_post.sum()), "unattributed": int((site == "post-proj").sum()),
        "post_mla_ms": ms(site == "mla"), "post_kda_ms": ms(site == "kda"), "post_total_ms": ms(is_post),
        "post_mla_gap_ms": float(gap[site == "mla"].sum()) / 1e6,
        "post_kda_gap_ms": float(gap[site == "kda"].sum()) / 1e6,
        "other_ms": ms(~is_post),
    }


def _summarise_attribution(verdicts: list[dict], layout: ModelLayout | None) -> dict[str, object]:
    if layout is None:
        return {"status": "no-layout", "message": "no model layout given"}
    ok = [v for v in verdicts if v["status"] == "ok"]
    bad = [v for v in verdicts if v["status"] == "count-mismatch"]
    checked = sum(int(v["checked"]) for v in ok)
    agree = sum(int(v["agree"]) for v in ok)
    n = len(verdicts)
    if not ok:
        if bad:
            found = sorted({int(v["found"]) for v in bad})
            msg = (f"post-projection copies per step: found {found}, layout has {layout.layers} layers — "
                   "not attributed (a build that returns projections directly, torch.compile, or another model?)")
        else:
            msg = "no step had a token count to size the [N, hidden] copy"
        return {"status": "not-attributed", "steps_attributed": 0, "steps": n, "message": msg}
    per_step = checked / len(ok)
    how = "size" if all(v.get("method") == "size" for v in ok) else "neighbour kernels (copy sizes absent from the trace)"
    if checked:
        msg = f"attributed by order and {how}; order and anchors agree on {round(agree / len(ok))}/{round(per_step)} anchored layers per step"
    else:
        msg = f"attributed by order and {how}; no anchor kernels found to cross-check"
    if bad:
        msg += f"; {len(bad)} of {n} steps had another count and were not attributed"
    return {"status": "ok" if not bad else "partial", "steps_attributed": len(ok), "steps": n,
            "anchored": checked, "anchors_agree": agree, "message": msg}


def _layout_hint(copies: pd.DataFrame, n_steps: int) -> str | None:
    if copies.empty or not n_steps:
        return None
    from copyprof.models import PRESETS

    per_size = copies.groupby("bytes").size() / n_steps
    for preset in PRESETS.values():
        for nbytes, per in per_size.items():
            if round(per) == preset.layers and nbytes > 0 and nbytes % (preset.hidden * preset.dtype_bytes) == 0:
                return f"{per:.0f} copies of {nbytes:,} B per step fit {preset.name}: try --model {preset.name}"
    return None

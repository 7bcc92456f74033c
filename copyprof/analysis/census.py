"""Per-step census of device-to-device copies, and attribution of post-projection copies.

A post-attention-projection copy is the `[N, hidden] x dtype` copy each decoder layer makes
when an attention module writes into a caller-owned buffer (`output[:] = o_proj(x)`). In a
step, the k-th such copy belongs to the k-th layer, whose kind (MLA/KDA) comes from the
layout (vllm-and-kimi.md §4.3, §12.2). When the count is not the layer count we say so and do
not attribute. Same-size copies right before an all-reduce kernel are eager all-reduce
staging copies (custom all-reduce copies its input into the IPC buffer), not projections.
Anchor kernels (taxonomy/anchors.py) between consecutive copies cross-check the kinds.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from copyprof.analysis.steps import GPU_KINDS, Steps
from copyprof.events import name_array
from copyprof.models import ModelLayout
from copyprof.taxonomy.anchors import anchor_kind, is_allreduce
from copyprof.taxonomy.copies import bytes_match, copy_class, resolve_copy_bytes

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
    cls = copy_class(events)
    events = resolve_copy_bytes(events, cls, cus=cus)
    table = steps.table if all_steps else steps.decode
    counted = set(table["step"].tolist())
    step_of = steps.step_of
    on_dev = events["on_gpu"].to_numpy() & events["kind"].isin(GPU_KINDS).to_numpy()
    if steps.device >= 0:
        on_dev &= events["device"].to_numpy() == steps.device
    in_steps = on_dev & np.isin(step_of, list(counted))
    gpu = events[in_steps].assign(step=step_of[in_steps], cls=cls[in_steps].to_numpy())
    gpu = gpu.sort_values(["step", "start_ns"], kind="stable")
    gpu["gap_ns"] = _gap_after(gpu)
    tokens = _tokens(table, gpu, layout)
    rows, per_step, verdicts = [], [], []
    for step_id, group in gpu.groupby("step", sort=False):
        n_tok = tokens.get(step_id)
        sites, layers, verdict = _classify_step(group, layout, n_tok)
        verdicts.append(verdict)
        cp = group[group["cls"] == "d2d"].copy()
        cp["site"], cp["layer"] = sites, layers
        cp["next_kernel"] = _next_kernel_names(group, cp.index)
        if verdict.get("method") == "neighbours" and n_tok:
            # Attributed by place, not size: the layout says what they must be; say so.
            implied = np.isin(np.asarray(sites), ["mla", "kda", "post-proj"]) & (cp["bytes"].to_numpy() < 0)
            cp.loc[implied, "bytes"] = layout.post_proj_bytes(n_tok)
            cp["bytes_src"] = cp["bytes_src"].astype(object).where(~implied, "layout")
        cp["pos"] = np.arange(len(cp))
        rows.append(cp)
        per_step.append(_step_figures(step_id, n_tok, cp))
    copies = pd.concat(rows)[COPY_COLUMNS] if rows else pd.DataFrame(columns=COPY_COLUMNS)
    ps = pd.DataFrame(per_step)
    if not ps.empty:
        ps = ps.merge(table[["step", "period_ns", "span_ns"]], on="step", how="left")
    census = Census(copies=copies.reset_index(drop=True), per_step=ps)
    census.attribution = _summarise_attribution(verdicts, layout)
    if layout is None:
        census.notes.append("attribution to MLA/KDA layers needs a model layout (--model)")
        hint = _layout_hint(copies, len(counted))
        if hint:
            census.notes.append(hint)
    return census


def _gap_after(gpu: pd.DataFrame) -> np.ndarray:
    """Idle time after each GPU op until the next op of the same step starts (>= 0)."""
    start = gpu["start_ns"].to_numpy()
    end = start + gpu["dur_ns"].to_numpy()
    step = gpu["step"].to_numpy()
    nxt = np.append(start[1:], -1)
    same = np.append(step[1:] == step[:-1], False)
    return np.where(same, np.maximum(nxt - end, 0), 0)


def _tokens(table: pd.DataFrame, gpu: pd.DataFrame, layout: ModelLayout | None) -> dict[int, int | None]:
    out: dict[int, int | None] = {}
    for step_id, tok in zip(table["step"], table["tokens"]):
        out[int(step_id)] = None if pd.isna(tok) else int(tok)
    if layout is None or all(v is not None for v in out.values()):
        return out
    inferred = _infer_tokens(gpu[gpu["cls"] == "d2d"], layout)
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


def _classify_step(group: pd.DataFrame, layout: ModelLayout | None, n_tok: int | None) -> tuple[list[str], list[int], dict]:
    copies = group[group["cls"] == "d2d"]
    n = len(copies)
    sites = ["other"] * n
    layers = [-1] * n
    verdict: dict[str, object] = {"status": "no-layout"}
    if layout is None or n_tok is None:
        if layout is not None:
            verdict = {"status": "no-tokens"}
        return sites, layers, verdict
    target = layout.post_proj_bytes(n_tok)
    match = bytes_match(copies["bytes"].to_numpy(), copies["bytes_src"].astype(str).to_numpy(), target)
    nxt_kernel = _next_kernel_names(group, copies.index)
    method = "size"
    if not match.any() and (copies["bytes"].to_numpy() < 0).any():
        match = _match_by_neighbours(group, copies, layout.layers, nxt_kernel)
        method = "neighbours"
    post_idx = []
    for i in range(n):
        if not match[i]:
            continue
        if is_allreduce(nxt_kernel[i]):
            sites[i] = "allreduce-staging"
        else:
            post_idx.append(i)
    if len(post_idx) != layout.layers:
        for i in post_idx:
            sites[i] = "post-proj"
        return sites, layers, {"status": "count-mismatch", "found": len(post_idx), "expected": layout.layers,
                               "method": method}
    anchors = _anchor_kinds(group, copies, post_idx)
    agree = checked = 0
    for k, i in enumerate(post_idx):
        kind = layout.layer_kinds[k]
        sites[i], layers[i] = kind, k + 1
        if anchors[k]:
            checked += 1
            agree += anchors[k] == kind
    # Other copies: the layer they sit in (after copy k-1, up to copy k -> layer k).
    post_pos = np.array(post_idx)
    for i in range(n):
        if sites[i] in ("other", "allreduce-staging"):
            layers[i] = int(np.searchsorted(post_pos, i, side="left")) + 1
    return sites, layers, {"status": "ok", "checked": checked, "agree": agree, "method": method}


def _match_by_neighbours(group: pd.DataFrame, copies: pd.DataFrame, layers: int, nxt: list[str]) -> np.ndarray:
    """Size-less copies (graph-replayed rocclr blits in Kineto carry neither bytes nor grid):
    the post-projection copies are the one group of copies that share a neighbour kernel
    (next kernel, else previous kernel) and number exactly one per layer. In Kimi-K3 the copy
    is followed by the pre-MLP `_attn_res_kernel` in every layer; in Kimi-Linear by the
    post-attention norm; a KDA placement copy has other neighbours."""
    unknown = copies["bytes"].to_numpy() < 0
    prv = _prev_kernel_names(group, copies.index)
    for keys in (nxt, prv, [f"{a}|{b}" for a, b in zip(prv, nxt)]):
        counts: dict[str, int] = {}
        for k, u in zip(keys, unknown):
            if u:
                counts[k] = counts.get(k, 0) + 1
        hits = [k for k, c in counts.items() if c == layers and k not in ("", "|")]
        if len(hits) == 1:
            return unknown & (np.array(keys, dtype=object) == hits[0])
    return np.zeros(len(copies), dtype=bool)


def _neighbour_kernel_names(group: pd.DataFrame, copy_index: pd.Index, step: int) -> list[str]:
    """Name of the nearest kernel after (step=1) or before (step=-1) each copy in the step."""
    names = name_array(group)
    kinds = group["kind"].to_numpy()
    pos = {idx: i for i, idx in enumerate(group.index)}
    out = []
    for idx in copy_index:
        j = pos[idx] + step
        while 0 <= j < len(names) and kinds[j] != "kernel":
            j += step
        out.append(names[j] if 0 <= j < len(names) else "")
    return out


def _prev_kernel_names(group: pd.DataFrame, copy_index: pd.Index) -> list[str]:
    return _neighbour_kernel_names(group, copy_index, -1)


def _next_kernel_names(group: pd.DataFrame, copy_index: pd.Index) -> list[str]:
    return _neighbour_kernel_names(group, copy_index, 1)


def _anchor_kinds(group: pd.DataFrame, copies: pd.DataFrame, post_idx: list[int]) -> list[str]:
    """Anchor kind ('mla'/'kda'/'' or 'both') in the window before each post-proj copy."""
    names = name_array(group)
    pos = {idx: i for i, idx in enumerate(group.index)}
    bounds = [pos[copies.index[i]] for i in post_idx]
    out, prev = [], -1
    for b in bounds:
        kinds = {anchor_kind(n) for n in names[prev + 1 : b]} - {""}
        out.append("both" if len(kinds) > 1 else (kinds.pop() if kinds else ""))
        prev = b
    return out


def _step_figures(step_id: int, n_tok: int | None, cp: pd.DataFrame) -> dict[str, object]:
    def ms(mask: np.ndarray) -> float:
        return float(cp["dur_ns"].to_numpy()[mask].sum()) / 1e6

    site = cp["site"].to_numpy()
    is_post = np.isin(site, ["mla", "kda"])
    gap = cp["gap_ns"].to_numpy()
    return {
        "step": step_id, "tokens": n_tok, "copies": len(cp), "other": int((~is_post).sum()),
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

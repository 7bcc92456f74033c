"""Which copy sites a candidate removed, and which patch scope that is (the A/B's "what").

Post-projection sites are compared by layer kind where both arms' copies were placed in
layers; otherwise (a candidate whose structure could not be read) by pooling: a candidate's
copies of the same size and place as the baseline's post-projection copies count as such,
and the kinds whose counts add up to what disappeared are the scope.
"""
from __future__ import annotations

from itertools import combinations

import numpy as np

from copyprof.analysis.ab.results import GroupChange, RemovedSite, SiteChange
from copyprof.analysis.results import Candidate, RunReport, Site
from copyprof.models.layout import kind_label
from copyprof.vocabulary import CandidateForm, GroupStatus, Role, SiteStatus, UNATTRIBUTED_SITE



def is_post_site(s: Site) -> bool:
    return s.role == Role.POST or s.site == UNATTRIBUTED_SITE


def site_key(s: Site) -> tuple[int, str]:
    """Identity of a copy site across arms: measured size, or place (next kernel) when the
    trace gave no size (a layout-implied size is not a measurement and is not compared)."""
    nbytes = -1 if s.bytes_src == "layout" else int(s.bytes)
    return nbytes, s.neighbour


def _site_counts(run: RunReport, post_keys: set[tuple[int, str]] | None = None) -> dict[tuple[str, int, str], float]:
    """Per-step copies by (family, bytes, neighbour). Post-projection sites pool into one family;
    with ``post_keys`` (the baseline's post-projection sizes/neighbours) a candidate's
    unattributed copies of the same size and place count as post-projection too."""
    out: dict[tuple[str, int, str], float] = {}
    placed = run.attribution.method == "structure"  # its roles come from the layers: nothing to pool
    for s in run.sites:
        post = is_post_site(s) or (not placed and post_keys is not None and s.site == Role.OTHER and site_key(s) in post_keys)
        key = (UNATTRIBUTED_SITE if post else s.site, *site_key(s))
        out[key] = out.get(key, 0.0) + float(s.per_step)
    return out


def post_keys(base: RunReport) -> set[tuple[int, str]]:
    return {site_key(s) for s in base.sites if is_post_site(s)}


def _kinds(run: RunReport) -> list[str]:
    return [k for k in run.per_step.post_proj if k != "total"]


def removed_scope(base: RunReport, cand: RunReport) -> tuple[str | None, str]:
    """Which layer kinds' post-projection copies the candidate no longer makes: a kind, several
    joined by "+", "all", or None (none removed, or a change no patch scope explains)."""
    b = base.per_step.post_proj
    hb, hc = base.per_step.host_copies, cand.per_step.host_copies
    if hb is not None and hc is not None:
        return None, (f"CPU-only traces: {hb} → {hc} `aten::copy_` ops per step ({hb - hc} fewer in the candidate); "
                      "device copies need a GPU trace")
    if base.layout is None:
        return None, "the baseline has no attributed post-projection copies (give --model, or check the baseline build)"
    if b["total"] == 0:
        if not site_changes(base, cand):
            return None, ("no post-projection copies in either arm, and the same copies per step in both: "
                          "the candidate changed no copy")
        return None, ("no post-projection copies in the baseline: nothing for a direct-return patch to remove; "
                      "the candidate changed other copies (see the site changes)")
    kinds = [k for k in _kinds(base) if b[k] > 0]
    c = cand.per_step.post_proj
    pooled = round(sum(v for (fam, _, _), v in _site_counts(cand, post_keys(base)).items() if fam == UNATTRIBUTED_SITE))
    if _kinds(cand) != _kinds(base) or any(s.site == UNATTRIBUTED_SITE for s in cand.sites):
        return _scope_from_total(b, kinds, pooled)  # the candidate's copies are not all placed in layers
    left = {k: int(c.get(k, 0)) for k in kinds}
    if all(left[k] == b[k] for k in kinds) and pooled == b["total"]:
        return None, f"all {b['total']} post-projection copies still there: the candidate removed none"
    removed = [k for k in kinds if left[k] == 0]
    if any(0 < left[k] != b[k] for k in kinds) or not removed or pooled != sum(left.values()):
        now = ", ".join(f"{left[k]} {kind_label(k)}" for k in kinds)
        return None, f"post-projection copies per step changed from {b['total']} to {pooled} ({now}): matches no patch scope"
    return _scope_text(b, kinds, removed)


def _scope_from_total(b: dict[str, int], kinds: list[str], left: int) -> tuple[str | None, str]:
    """Scope from the candidate's pooled count alone: the kinds whose counts add up to what left."""
    if left == b["total"]:
        return None, f"all {b['total']} post-projection copies still there: the candidate removed none"
    for r in range(len(kinds), 0, -1):
        for removed in combinations(kinds, r):
            if sum(b[k] for k in kinds if k not in removed) == left:
                return _scope_text(b, kinds, list(removed))
    return None, f"post-projection copies per step changed from {b['total']} to {left}: matches no patch scope"


def _scope_text(b: dict[str, int], kinds: list[str], removed: list[str]) -> tuple[str, str]:
    kept = [k for k in kinds if k not in removed]
    if not kept:
        detail = " + ".join(f"{b[k]} {kind_label(k)}" for k in kinds)
        return "all", f"all {b['total']} post-projection copies gone ({detail})"
    gone = " + ".join(f"{b[k]} {kind_label(k)}" for k in removed)
    still = " + ".join(f"{b[k]} {kind_label(k)}" for k in kept)
    return "+".join(removed), f"{gone} post-projection copies gone, {still} still there"


def scope_kinds(scope: str | None, base: RunReport) -> tuple[str, ...]:
    if scope is None or scope == "groups":
        return ()
    return tuple(_kinds(base)) if scope == "all" else tuple(scope.split("+"))


def site_changes(base: RunReport, cand: RunReport) -> list[SiteChange]:
    """Copy sites whose per-step count differs between the arms (post-projection sites pooled)."""
    keys = post_keys(base)
    b, c = _site_counts(base, keys), _site_counts(cand, keys)
    rows = []
    for key in sorted(set(b) | set(c)):
        nb, nc = b.get(key, 0.0), c.get(key, 0.0)
        if abs(nb - nc) < 1e-9:
            continue
        status = SiteStatus.REMOVED if nc == 0 else (SiteStatus.APPEARED if nb == 0 else SiteStatus.CHANGED)
        rows.append(SiteChange(site=key[0], bytes=key[1], neighbour=key[2], baseline_per_step=nb,
                               candidate_per_step=nc, status=status))
    return rows


def removed_sites(base: RunReport, kinds: tuple[str, ...]) -> list[RemovedSite]:
    return [RemovedSite(bytes=int(s.bytes), layer_kind=s.site, per_step=int(round(s.per_step)))
            for s in base.sites if s.site in kinds]


def scope_estimate(base: RunReport, scope: str | None) -> tuple[float, float]:
    """The baseline's removable ms (kernel, kernel + gap) for ``scope``: its estimate entry, or,
    for several kinds of a layout with more, the median over steps of their summed copies."""
    est = {e.scope: e for e in base.estimate}
    if scope is None or scope == "groups":
        return 0.0, 0.0
    if scope in est:
        return float(est[scope].removable_ms), float(est[scope].removable_with_gap_ms)
    series = base.step_series
    kinds = scope_kinds(scope, base)
    kernel = [np.asarray(series.get(f"post_{k}_ms", []), dtype=float) for k in kinds]
    gap = [np.asarray(series.get(f"post_{k}_gap_ms", []), dtype=float) for k in kinds]
    if not kernel or any(len(x) != len(kernel[0]) or not len(x) for x in kernel + gap):
        return 0.0, 0.0
    total = np.sum(kernel, axis=0)
    return float(np.median(total)), float(np.median(total + np.sum(gap, axis=0)))


def group_changes(base: RunReport, cand: RunReport) -> list[GroupChange]:
    """Every copy group whose copies per step differ between the arms (candidates.py groups):
    gone, fewer, more, new, or moved (the same code's copies in other layers or of another size)."""
    in_base = {g.key: g for g in base.candidates if g.form == CandidateForm.COPY}
    in_cand = {g.key: g for g in cand.candidates if g.form == CandidateForm.COPY}
    out = []
    for key in list(in_base) + [k for k in in_cand if k not in in_base]:
        x, y = in_base.get(key), in_cand.get(key)
        nb, nc = (x.per_step if x else 0.0), (y.per_step if y else 0.0)
        first = x or y
        assert first is not None
        status = _group_status(x, y, nb, nc)
        if status is None:
            continue
        per_copy = (x.removable_ms or 0.0) / nb if x and nb else 0.0
        per_copy_gap = (x.removable_with_gap_ms or 0.0) / nb if x and nb else 0.0
        out.append(GroupChange(role=first.role, source=first.source, producer=first.producer, key=key,
                               layers=first.layers, bytes=first.bytes, baseline_per_step=nb, candidate_per_step=nc,
                               status=status, estimate_ms=per_copy * (nb - nc),
                               estimate_with_gap_ms=per_copy_gap * (nb - nc)))
    return out


def _group_status(x: Candidate | None, y: Candidate | None, nb: float, nc: float) -> GroupStatus | None:
    if x is not None and y is not None and abs(nb - nc) < 1e-9:
        return GroupStatus.MOVED if (x.layers != y.layers or x.bytes != y.bytes) else None
    if nc == 0:
        return GroupStatus.GONE
    if nb == 0:
        return GroupStatus.NEW
    return GroupStatus.FEWER if nc < nb else GroupStatus.MORE


def group_scope_text(changes: list[GroupChange]) -> str:
    """What the candidate changed, in the roles and code the candidates table names."""
    parts = []
    for g in changes:
        who = g.source.split("/")[-1] if g.source else g.producer
        delta = g.baseline_per_step - g.candidate_per_step
        n = f"{abs(delta):g}"
        parts.append(f"{n} {g.role} copies per step {g.status} ({who})" if g.status != GroupStatus.MOVED
                     else f"{g.role} copies moved ({who})")
    return "; ".join(parts)

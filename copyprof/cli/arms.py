"""Which runs are which arm: `report --baseline R1 R2 --candidate C1 C2 [--aa A1 A2]`, the
positional `RUN [CANDIDATE]`, or one parent folder whose run directories `copyprof run`
grouped in an A/B (run.json ``ab``: group, arm, repeat).

Only run.json is read here (a few hundred bytes per run); the traces are read once, later.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import click

from copyprof.errors import CopyprofError
from copyprof.rundir.record import RUN_JSON, AbTag, given, load_run_record

ARM_OPTIONS = ("--baseline", "--candidate", "--aa")


class ArmsCommand(click.Command):
    """Lets ``--baseline``/``--candidate``/``--aa`` take several values (``--baseline R1 R2``):
    every value up to the next option is that option's, as if it had been repeated."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out: list[str] = []
        current: str | None = None
        for a in args:
            if a in ARM_OPTIONS:
                current = a
                continue
            if a.startswith("-"):
                current = None
                out.append(a)
                continue
            out += [current, a] if current else [a]
        return super().parse_args(ctx, out)


@dataclass
class ArmPaths:
    baseline: list[str]
    candidate: list[str] = field(default_factory=list)
    aa: list[str] = field(default_factory=list)
    labels: tuple[str, str] = ("baseline", "candidate")
    note: str = ""

    @property
    def is_aa_only(self) -> bool:
        return not self.candidate and len(self.aa) >= 2


def _ab(path: str) -> AbTag | None:
    """The run's A/B tag, when its run.json has one naming a group and an arm."""
    try:
        ab = given(load_run_record(path).ab)
    except CopyprofError:  # no run.json, or one that does not read: not a run of an A/B
        return None
    return ab if ab is not None and ab.group and ab.arm else None


def grouped_runs(parent: str) -> ArmPaths | None:
    """The arms of a folder of `copyprof run --repeat/--python-b` run directories (None when the
    folder is not one: it holds a trace itself, or no run directory with an ``ab`` record)."""
    if not os.path.isdir(parent) or os.path.isfile(os.path.join(parent, RUN_JSON)):
        return None
    runs = sorted(os.path.join(parent, d) for d in os.listdir(parent) if os.path.isdir(os.path.join(parent, d)))
    tagged = [(p, ab) for p in runs if (ab := _ab(p)) is not None]
    if not tagged:
        return None
    groups = {ab.group for _, ab in tagged}
    if len(groups) > 1:
        raise CopyprofError(f"holds the runs of {len(groups)} A/B groups ({', '.join(sorted(groups))}): give the "
                            "arms with --baseline R1 R2 --candidate C1 C2", path=parent)
    order = list(tagged[0][1].arms) or sorted({ab.arm for _, ab in tagged})
    by_arm = {arm: [p for p, ab in sorted(tagged, key=lambda t: t[1].position) if ab.arm == arm]
              for arm in order}
    by_arm = {a: ps for a, ps in by_arm.items() if ps}
    labels = list(by_arm)
    note = f"runs grouped by run.json's ab field (group {tagged[0][1].group}): " + \
        ", ".join(f"{a}: {len(ps)}" for a, ps in by_arm.items())
    if len(labels) == 1:
        return ArmPaths(baseline=[], aa=by_arm[labels[0]], labels=(labels[0], labels[0]), note=note)
    if len(labels) > 2:
        raise CopyprofError(f"holds {len(labels)} arms ({', '.join(labels)}): give two with --baseline and "
                            "--candidate", path=parent)
    return ArmPaths(baseline=by_arm[labels[0]], candidate=by_arm[labels[1]], labels=(labels[0], labels[1]), note=note)


def resolve_arms(runs: tuple[str, ...], baseline: tuple[str, ...], candidate: tuple[str, ...],
                 aa: tuple[str, ...]) -> ArmPaths:
    """The arms from the command line (positional runs, or the options, not both)."""
    if runs and (baseline or candidate):
        raise CopyprofError("give the runs either as RUN [CANDIDATE] or with --baseline/--candidate, not both")
    if candidate and not baseline:
        raise CopyprofError("--candidate needs --baseline")
    if baseline:
        return ArmPaths(list(baseline), list(candidate), list(aa))
    if len(runs) > 2:
        raise CopyprofError("report takes one run, a baseline and a candidate, or --baseline R1 R2 --candidate C1 C2")
    if len(runs) == 1 and not aa:
        grouped = grouped_runs(runs[0])
        if grouped is not None:
            return grouped
    if not runs:
        if len(aa) >= 2:
            return ArmPaths(baseline=[], aa=list(aa))
        raise CopyprofError("no run given: report RUN [CANDIDATE], --baseline ... --candidate ..., or --aa R1 R2")
    return ArmPaths([runs[0]], list(runs[1:]), list(aa))

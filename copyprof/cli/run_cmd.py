"""``copyprof run``: capture a fixed-cohort, decode-only profile window from vLLM (or the replica).

The command is a thin layer: options -> :class:`~copyprof.capture.vllm.command.RunSpec` and
:class:`~copyprof.capture.vllm.run.CaptureOptions`, A/B ordering from
:mod:`copyprof.capture.vllm.plan`, progress with rich. The printed result (stdout) is one run
directory per line, so scripts can pick it up; progress and errors go to stderr.
"""
from __future__ import annotations

import os
import re
import sys
import uuid
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.status import Status

from copyprof.errors import CopyprofError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from copyprof.capture.vllm.command import RunSpec
    from copyprof.capture.vllm.plan import Arm, ResolvedModel

_EPILOG = """\b
Examples:
  copyprof run --model kimi-k3 --tp 8 --concurrency 16
  copyprof run --model ./k3-config-only --dummy --profiler rocprofv3 -- --enforce-eager
  copyprof run --model kimi-k3 --python /envs/base/bin/python --label baseline \\
               --python-b /envs/patched/bin/python --label-b candidate --repeat 3 --interleave
\b
A/B: --python/--label are arm A, --python-b/--label-b arm B (defaults: baseline, candidate).
--repeat N runs each arm N times; --interleave orders them ABBA ABBA ... so that slow drift
cancels in the A-B difference; without it all A runs come first. Every run gets its own
directory; run.json's "ab" field names the group, arm, repeat index and position.
\b
Everything after "--" is passed to vLLM unchanged (an argument list; no shell is involved).
"""


class _Progress:
    """Stages on stderr: a rich spinner on a terminal, plain lines otherwise (CI, pipes)."""

    def __init__(self) -> None:
        self.console = Console(stderr=True, log_path=False)  # log lines: time and text, not the caller's file
        self.live = self.console.is_terminal and not os.environ.get("CI")
        self.status: Status | None = None
        self.current = ""

    def stage(self, name: str) -> None:
        self.current = name
        if self.live:
            if self.status is None:
                self.status = self.console.status(name)
                self.status.start()
            self.status.update(name)
            self.console.log(name)
        else:
            click.echo(f"copyprof: {name}", err=True)

    def detail(self, text: str) -> None:
        if self.live and self.status is not None:
            short = text.strip().replace("[", "\\[")[-110:]
            self.status.update(f"{self.current} [dim]{short}[/dim]")

    def info(self, text: str) -> None:
        if self.live:
            self.console.log(text)
        else:
            click.echo(f"copyprof: {text}", err=True)

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


def _label(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-.") or "run"
    return cleaned[:120] if cleaned[0].isalnum() else "r" + cleaned[:119]


def _python(path: str | None) -> str:
    # abspath, not realpath: a venv's bin/python is a symlink whose location selects the venv.
    return os.path.abspath(path) if path else sys.executable


@click.command("run", short_help="Capture a fixed-cohort decode window from vLLM (or the replica engine).",
               context_settings={"show_default": True}, epilog=_EPILOG)
@click.option("--model", default=None,
              help="Preset (kimi-k3, qwen3-next-80b-a3b, ...), model directory, or hub id (not for --engine copies).")
@click.option("--engine", type=click.Choice(["vllm", "replica", "copies"]), default="vllm",
              help="vllm: serve and profile a real vLLM; replica: copyprof's one-rank decode replica; copies: "
                   "plain device-to-device copies of known sizes, eager and in CUDA graphs (--steps replays each).")
@click.option("--tp", type=int, default=None, show_default=False,
              help="Tensor-parallel size. Default: the preset's usual serving TP (kimi-k3 8, deepseek-v3 8, "
                   "qwen3-next-80b-a3b 4), else 1.")
@click.option("--concurrency", type=int, default=16, help="Cohort size N (= max-num-seqs = graph capture size).")
@click.option("--prefix-len", type=int, default=63911,
              help="Shared prefix tokens P. The default is the fixed-cohort trace of vLLM #50654 (63,911 shared "
                   "+ 4,089 distinct = 68,000 tokens of context), so decode steps attend over a long context; a "
                   "tiny test model needs far less.")
@click.option("--suffix-len", type=int, default=4089, help="Distinct suffix tokens S per request (see --prefix-len).")
@click.option("--steps", type=int, default=64, help="Decode steps in the profile window.")
@click.option("--profiler", type=click.Choice(["torch", "rocprofv3", "nsys"]), default="torch")
@click.option("--label", default=None, help="Run name (arm A). Default: <model>-tp<T>-c<N>-<profiler>.")
@click.option("--out", default="traces", help="Parent folder of the new run directories.")
@click.option("--dummy", is_flag=True, help="Random weights, no tokenizer: --load-format dummy --skip-tokenizer-init.")
@click.option("--python", "python_a", default=None, help="Python of the vLLM environment (arm A). Default: this one.")
@click.option("--python-b", default=None, help="Python of arm B (enables A/B).")
@click.option("--label-b", default=None, help="Run name of arm B.")
@click.option("--extra-arm", "extra_arms", multiple=True, metavar="LABEL=PYTHON",
              help="A further candidate arm beside --python-b (repeatable): its run name and the Python of its vLLM "
                   "environment. Every arm runs --repeat times; with --interleave in rotating order (ABC CBA ...).")
@click.option("--repeat", type=int, default=1, help="Runs per arm.")
@click.option("--interleave", is_flag=True, help="Alternate A and B runs (ABBA order).")
@click.option("--decode-tokens", type=int, default=None,
              help="Tokens per request (min = max, ignore_eos). Default: 2*steps + 4096, within the model's "
                   "max_position_embeddings; streams are cancelled after the window.")
@click.option("--with-stack/--no-with-stack", default=False, help="torch profiler Python stacks (costly; for eager attribution).")
@click.option("--enforce-eager", is_flag=True,
              help="[vllm] the eager companion of a graph run: --enforce-eager, with stacks and shapes, so that "
                   "`report GRAPH_RUN --sources THIS_RUN` can name each copy's code.")
@click.option("--rocprof-format", "rocprof_formats", multiple=True, default=("csv",),
              type=click.Choice(["csv", "json", "rocpd", "pftrace", "otf2"]), help="rocprofv3 output format(s).")
@click.option("--boot-timeout", type=float, default=1800.0, help="Seconds to wait for /health.")
@click.option("--timeout", type=float, default=1800.0, help="Seconds for every later wait (first tokens, window, flush).")
@click.option("--seed", type=int, default=0, help="Seed of the token-ID prompts.")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda", help="[replica] device.")
@click.option("--arm", type=click.Choice(["baseline", "candidate", "both"]), default="both", help="[replica] arm(s).")
@click.option("--remove", "remove", default="", help="[replica] KIND[,KIND]: add a partial arm without those kinds' copies.")
@click.option("--record-shapes", is_flag=True, help="[replica] record op input shapes (with --with-stack: copy sources).")
@click.option("--eager", is_flag=True, help="[replica] no CUDA graph.")
@click.option("--context", type=click.IntRange(min=1), default=None,
              help="[replica] tokens of context each request's decode step attends over (default 4,096; "
                   "a CPU smoke run needs far fewer).")
@click.option("--sizes", default=None, help="[copies] comma-separated byte sizes (default: the sizes of Kimi's and "
                                             "Qwen3-Next's copies, 4,608 to 1,048,576 B).")
@click.option("--timing-blocks", type=int, default=40, help="[replica] interleaved A/B timing blocks (0: none).")
@click.option("--timing-replays", type=int, default=50, help="[replica] steps per timing block.")
@click.option("--warmup", type=click.IntRange(min=1), default=3,
              help="[replica] steps run (and replayed) before the profile window, per arm.")
@click.argument("vllm_args", nargs=-1, type=click.UNPROCESSED)
def run_cmd(vllm_args: tuple[str, ...], **options: Any) -> None:
    """Capture a fixed-cohort, pure-decode profile window into a new run directory.

    Starts vLLM's OpenAI server (own process group, loopback port), warms the prefix cache,
    sends N streaming token-ID requests at once, and profiles STEPS decode steps once every
    request has its first token. Writes traces, server.log, client_metrics.json and run.json.
    """
    common = _options(CommonOptions, options)
    if common.engine == "copies":
        _run_copies(common, _options(CopiesOptions, options), vllm_args)
        return
    if not common.model:
        raise click.UsageError("Missing option '--model'.")
    tp = options["tp"]
    if tp is None:
        from copyprof.models.presets import default_tp

        tp, why = default_tp(common.model)
        click.echo(f"copyprof: note: --tp {tp} ({why}); pass --tp to choose", err=True)
    if common.engine == "replica":
        _run_replica(common, tp, _options(ReplicaOptions, options), vllm_args)
        return
    _run_vllm(common, tp, _options(VllmOptions, options), _options(AbOptions, options), vllm_args)


@dataclass(frozen=True)
class CommonOptions:
    """The options every engine takes."""

    engine: str
    model: str | None
    concurrency: int
    steps: int
    label: str | None
    out: str
    with_stack: bool


@dataclass(frozen=True)
class VllmOptions:
    """``--engine vllm``: the workload, the profiler and the server's limits."""

    prefix_len: int
    suffix_len: int
    decode_tokens: int | None
    profiler: str
    dummy: bool
    enforce_eager: bool
    rocprof_formats: tuple[str, ...]
    boot_timeout: float
    timeout: float
    seed: int


@dataclass(frozen=True)
class AbOptions:
    """``--engine vllm``: the two arms' environments and labels, and how often to run each."""

    python_a: str | None
    python_b: str | None
    label_b: str | None
    extra_arms: tuple[str, ...]
    repeat: int
    interleave: bool


@dataclass(frozen=True)
class ReplicaOptions:
    """``--engine replica``."""

    device: str
    arm: str
    eager: bool
    timing_blocks: int
    timing_replays: int
    warmup: int
    remove: str
    record_shapes: bool
    context: int | None


@dataclass(frozen=True)
class CopiesOptions:
    """``--engine copies`` (``--steps``: replays of each variant)."""

    device: str
    sizes: str | None


Group = TypeVar("Group", bound="DataclassInstance")


def _options(kind: type[Group], options: dict[str, Any]) -> Group:
    """The click options that ``kind`` groups (by field name)."""
    return kind(**{f.name: options[f.name] for f in fields(kind)})


def _run_vllm(common: CommonOptions, tp: int, opts: VllmOptions, ab: AbOptions, vllm_args: tuple[str, ...]) -> None:
    """``--engine vllm``: one capture, or the runs of an A/B in their planned order."""
    from copyprof.capture.vllm.command import RunSpec
    from copyprof.capture.vllm.plan import resolve_model, schedule
    from copyprof.capture.vllm.process_group import adopt_orphans

    assert common.model is not None
    adopt_orphans()  # server processes orphaned by a dying API server are reaped by us, not left as zombies

    resolved = resolve_model(common.model)
    if opts.dummy and resolved.kind != "directory":
        click.echo(f"copyprof: note: --dummy with {resolved.arg!r}: vLLM must find its config.json in the local "
                   "Hugging Face cache (copyprof fetches nothing)", err=True)
    spec = RunSpec(model=resolved.arg, tp=tp, concurrency=common.concurrency, prefix_len=opts.prefix_len,
                   suffix_len=opts.suffix_len, steps=common.steps, decode_tokens=opts.decode_tokens,
                   profiler=opts.profiler, dummy=opts.dummy, with_stack=common.with_stack or opts.enforce_eager,
                   record_shapes=opts.enforce_eager, enforce_eager=opts.enforce_eager,
                   rocprof_formats=tuple(dict.fromkeys(opts.rocprof_formats)), extra_args=tuple(vllm_args),
                   model_max_positions=resolved.max_positions)
    spec.validate()
    arms = _arms(common, ab, _label(f"{resolved.name}-tp{tp}-c{common.concurrency}-{opts.profiler}"))
    _capture_plan(common, opts, spec, resolved, arms, schedule(arms, ab.repeat, ab.interleave), ab)


def _arms(common: CommonOptions, ab: AbOptions, default: str) -> list[Arm]:
    """Arm A, and arm B when ``--python-b`` asks for an A/B."""
    from copyprof.capture.vllm.plan import Arm

    if (ab.label_b or ab.interleave) and not ab.python_b:
        raise CopyprofError("--label-b and --interleave need --python-b (the second arm's vLLM environment)")
    if ab.extra_arms and not ab.python_b:
        raise CopyprofError("--extra-arm needs --python-b (the first candidate arm's vLLM environment)")
    arms = [Arm(_label(common.label or ("baseline" if ab.python_b else default)), _python(ab.python_a))]
    if ab.python_b:
        arms.append(Arm(_label(ab.label_b or "candidate"), _python(ab.python_b)))
    for spec in ab.extra_arms:
        label, sep, python = spec.partition("=")
        if not sep or not label or not python:
            raise CopyprofError(f"--extra-arm {spec!r}: expected LABEL=PYTHON (a run name and a Python path)")
        arms.append(Arm(_label(label), _python(python)))
    labels = [a.label for a in arms]
    if len(set(labels)) < len(labels):
        dup = next(x for x in labels if labels.count(x) > 1)
        raise CopyprofError(f"two arms are labelled {dup!r}: give every arm (--label, --label-b, --extra-arm) its own name")
    return arms


def _capture_plan(common: CommonOptions, opts: VllmOptions, spec: RunSpec, resolved: ResolvedModel, arms: list[Arm],
                  plan: list[tuple[Arm, int]], ab: AbOptions) -> None:
    """Run every capture of the plan; print each finished run directory (and, when an A/B stops
    part-way, which runs completed)."""
    from copyprof.capture.vllm.run import CaptureOptions, capture_vllm
    from copyprof.rundir.record import AbTag, Model

    group = uuid.uuid4().hex[:12]
    progress = _Progress()
    done: list[str] = []
    try:
        for position, (a, i) in enumerate(plan):
            tag = None
            if len(plan) > 1:
                tag = AbTag(group=group, arm=a.label, repeat=i, position=position, runs=len(plan),
                            arms={x.label: x.python for x in arms}, order=[x.label for x, _ in plan],
                            interleaved=ab.interleave)
                progress.info(f"run {position + 1}/{len(plan)}: {a.label} (repeat {i + 1}/{ab.repeat})")
            capture = CaptureOptions(python=a.python, out=common.out, label=a.label, boot_timeout_s=opts.boot_timeout,
                                     timeout_s=opts.timeout, seed=opts.seed, vocab_size=resolved.vocab_size,
                                     model=Model(**{"name": resolved.name, "kind": resolved.kind, **resolved.summary}),
                                     command=list(sys.argv), ab=tag)
            run_dir = capture_vllm(spec, capture, progress)
            done.append(str(run_dir))
            progress.info(f"complete: {run_dir}")
    finally:
        progress.close()
        if done and len(plan) > 1 and len(done) < len(plan):
            click.echo(f"copyprof: {len(done)} of {len(plan)} runs completed before the failure: {', '.join(done)}",
                       err=True)
    for d in done:
        click.echo(d)


def _run_replica(common: CommonOptions, tp: int, opts: ReplicaOptions, vllm_args: tuple[str, ...]) -> None:
    """``--engine replica``: copyprof's own decode-step replica (no vLLM), see copyprof.capture.replica."""
    if vllm_args:
        raise CopyprofError("extra vLLM arguments after '--' make no sense with --engine replica")
    from copyprof.capture.replica import run_replica

    assert common.model is not None
    arms = ("baseline", "candidate") if opts.arm == "both" else (opts.arm,)
    dirs = run_replica(common.model, tp=tp, concurrency=common.concurrency, device=opts.device, arms=arms,
                       remove=tuple(k.strip() for k in opts.remove.split(",") if k.strip()), steps=common.steps,
                       graph=not opts.eager, timing_blocks=opts.timing_blocks, timing_replays=opts.timing_replays,
                       warmup=opts.warmup, context=opts.context, out=common.out, record_shapes=opts.record_shapes,
                       with_stack=common.with_stack,
                       label=_label(common.label) if common.label else None, command=list(sys.argv),
                       log=lambda msg: click.echo(f"copyprof: {msg}", err=True))
    for d in dirs:
        click.echo(str(d))


def _run_copies(common: CommonOptions, opts: CopiesOptions, vllm_args: tuple[str, ...]) -> None:
    """``--engine copies``: the copy micro-capture (copyprof.capture.replica.copies)."""
    if vllm_args:
        raise CopyprofError("extra vLLM arguments after '--' make no sense with --engine copies")
    from copyprof.capture.replica.copies import DEFAULT_SIZES, run_copies

    try:
        wanted = [int(x) for x in opts.sizes.split(",") if x.strip()] if opts.sizes else list(DEFAULT_SIZES)
    except ValueError as exc:
        raise CopyprofError(f"--sizes must be comma-separated byte counts: {exc}") from exc
    for d in run_copies(device=opts.device, sizes=wanted, replays=common.steps, out=common.out,
                        label=_label(common.label) if common.label else "copies",
                        command=list(sys.argv), log=lambda msg: click.echo(f"copyprof: {msg}", err=True)):
        click.echo(str(d))

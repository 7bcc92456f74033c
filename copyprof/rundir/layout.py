"""Run directories: one new folder per capture, and a ``run.json`` that says what happened.

Why this exists: captures are expensive (device time) and users compare them later, so a
capture must never overwrite an earlier one, and a reader must be able to tell a finished
run from one that crashed half-way. Hence:

* :func:`new_run_dir` makes ``<out>/<label>-<UTC timestamp>`` with ``os.mkdir`` (atomic:
  it fails if the name exists), falling back to ``-2``, ``-3``, ... so two runs started in
  the same second, or by two processes, each get their own folder. An existing folder is
  never reused, so an existing non-empty folder is never written into.
* :func:`write_run_json` writes ``run.json`` through a temporary file and ``os.replace``,
  so a reader sees either the old or the new content, never half a file.
* ``status`` moves ``starting`` -> ``capturing`` -> ``complete`` or ``failed: <why>``;
  :func:`update_run_json` changes fields in place (load the record, replace fields, atomic
  write); :func:`mark_complete` and :func:`mark_failed` are the two ends.

What run.json holds is the typed :class:`~copyprof.rundir.record.RunRecord`; every writer goes
through :func:`write_run_json` and every reader through
:func:`~copyprof.rundir.record.load_run_record`.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from copyprof.errors import EXIT_CAPTURE_FAILED, CopyprofError
from copyprof.rundir.record import RUN_JSON, RunRecord, given, load_run_record, record_json

STATUS_STARTING = "starting"
STATUS_CAPTURING = "capturing"
STATUS_COMPLETE = "complete"
_MAX_SUFFIX = 1000
_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,150}$")


def utc_now_iso() -> str:
    """ISO-8601 UTC time with a ``Z`` suffix, second resolution (for run.json)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def new_run_dir(out: str | os.PathLike[str], label: str) -> Path:
    """Create and return a new, empty run directory ``<out>/<label>-<UTC timestamp>[-k]``.

    ``out`` is created if missing. The label must be a plain name (letters, digits, ``._+-``)
    so that it cannot point outside ``out``. Never returns a folder that existed before.
    """
    if not _LABEL_RE.match(label):
        raise CopyprofError(f"bad run label {label!r}: use letters, digits, '.', '_', '+', '-' (no slashes)")
    root = Path(out)
    if root.exists() and not root.is_dir():
        raise CopyprofError("output path exists and is not a directory", path=str(root))
    root.mkdir(parents=True, exist_ok=True)
    base = f"{label}-{_utc_stamp()}"
    for k in range(1, _MAX_SUFFIX + 1):
        candidate = root / (base if k == 1 else f"{base}-{k}")
        try:
            candidate.mkdir()  # atomic claim: FileExistsError if anything has this name
        except FileExistsError:
            continue
        return candidate
    raise CopyprofError(f"could not find a free run directory name for {base!r} after {_MAX_SUFFIX} tries", path=str(root))


def write_run_json(run_dir: Path, record: RunRecord) -> None:
    """Write ``run_dir/run.json`` atomically (temporary file in the same folder + ``os.replace``).

    A full disk (or a file-size limit) leaves the previous run.json in place and raises a
    one-line capture error naming the file, not an OSError traceback.
    """
    run_dir = Path(run_dir)
    data = record_json(record)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".run.json.", suffix=".tmp", dir=run_dir)
    except OSError as exc:
        raise write_error(run_dir / RUN_JSON, exc) from exc
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; run.json is meant to be read by others
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, run_dir / RUN_JSON)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise write_error(run_dir / RUN_JSON, exc) from exc
        raise


def write_error(path: Path, exc: OSError) -> CopyprofError:
    """The capture error for a failed write (ENOSPC, EFBIG under RLIMIT_FSIZE, EROFS, EACCES)."""
    return CopyprofError(f"cannot write {path.name}: {exc.strerror or exc} (disk full or not writable?)",
                         path=str(path.parent), exit_code=EXIT_CAPTURE_FAILED)


def update_run_json(run_dir: Path, **changes: Any) -> RunRecord:
    """Set fields of ``run.json`` (read, ``msgspec.structs.replace``, atomic rewrite); return the new record.

    A name that is no field of :class:`RunRecord` is a TypeError (a writer's mistake, found at once).
    Single writer per run directory is assumed (the capturing process); the atomic replace
    protects readers, not concurrent writers.
    """
    record = msgspec.structs.replace(load_run_record(run_dir), **changes)
    write_run_json(run_dir, record)
    return record


def mark_complete(run_dir: Path, **changes: Any) -> RunRecord:
    """``status: complete``, the finishing time, and ``changes``."""
    return update_run_json(run_dir, status=STATUS_COMPLETE, finished=utc_now_iso(), **changes)


def mark_failed(run_dir: Path, why: str, **changes: Any) -> RunRecord:
    """``status: failed: <why>``, the finishing time, and ``changes``."""
    return update_run_json(run_dir, status=failed_status(why), finished=utc_now_iso(), **changes)


def failed_status(why: str) -> str:
    """The ``status`` value for a failed run: ``failed: <why>`` on one line."""
    one_line = " ".join(str(why).split())
    return f"failed: {one_line[:500]}" if one_line else "failed: unknown error"


MODEL_CONFIG = "model_config.json"  # a copy of the served model's config.json, where it had one


def recorded_model_name(run: str) -> str | None:
    """The model's name as run.json records it (its directory's name when copyprof ran it)."""
    try:
        model = given(load_run_record(run).model)
    except CopyprofError:
        return None
    return given(model.name) if model is not None else None


def recorded_model(run: str) -> str | None:
    """The model a run directory's run.json names, as ``--model`` would take it: a preset name,
    a config.json / model directory that still exists, or a hub id matching a preset; None
    when the run records none (or is not a run directory)."""
    if not (Path(run) / RUN_JSON).is_file():
        return None
    if (Path(run) / MODEL_CONFIG).is_file():
        return str(Path(run) / MODEL_CONFIG)
    try:
        record = load_run_record(run)
    except CopyprofError:
        return None
    model = given(record.model)
    if model is None:
        return None
    source = given(model.source)
    if source is not None and source not in ("preset", "config") and os.path.exists(source):
        return source  # a replica run of a config.json
    server = given(record.server)
    argv = server.argv if server is not None else []
    if given(model.kind) == "directory" and "--model" in argv:
        where = argv[argv.index("--model") + 1] if argv.index("--model") + 1 < len(argv) else None
        if where is not None and os.path.isdir(where):
            return where
    return next((v for v in (given(model.name), given(model.hf_id)) if v is not None), None)

"""run.json exactly as a capture wrote it: the raw JSON object, for tests of the on-disk contract
(its keys and values), as opposed to the typed record copyprof reads
(``copyprof.rundir.record.load_run_record``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_run_json(run_dir: Path) -> dict[str, Any]:
    """The JSON object in ``run_dir/run.json``."""
    data = json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict), data
    return data

"""The model layout a report uses: the one given (a preset, a config.json or a model
directory: ``--model`` of ``report`` and ``annotate``, ``model=`` of ``copyprof.api``), else the
one the run's own run.json records (a run made by ``copyprof run`` carries its model's config)."""
from __future__ import annotations

import os
from collections.abc import Sequence

from copyprof.errors import CopyprofError
from copyprof.models import ModelLayout, load_layout


def resolve_layout(model: str | None, runs: Sequence[str]) -> tuple[ModelLayout | None, str]:
    """The layout to use and a note saying where it came from ("" when --model gave it).

    Without --model, the first run whose run.json names a model copyprof can lay out decides
    (a run made by ``copyprof run`` always records it); when none does, there is no layout."""
    if model is not None:
        if not model.strip():
            from copyprof.models import PRESETS

            raise CopyprofError(f"--model is empty: give a preset ({', '.join(PRESETS)}), a config.json or a "
                                "model directory")
        return load_layout(model), ""
    from copyprof.rundir.layout import MODEL_CONFIG, recorded_model, recorded_model_name

    for run in runs:
        spec = recorded_model(run)
        if spec:
            try:
                layout = load_layout(spec, recorded_model_name(run) if spec.endswith(MODEL_CONFIG) else None)
            except CopyprofError:
                continue
            return layout, f"layout {layout.name} from {os.path.join(run, 'run.json')} (no --model given)"
    return None, ""

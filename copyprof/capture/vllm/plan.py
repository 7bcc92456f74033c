"""Plan captures: resolve ``--model`` and order A/B repeats.

Why: ``--model`` accepts three kinds of thing (a preset, a local directory, a hub id) and the
run record must say which one was measured and what its config was; and A/B comparisons drift
(clocks, thermals, page cache), so repeated A and B runs are interleaved in ABBA order, which
cancels a linear drift in the A-B difference, rather than run as AAA...BBB.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from copyprof.errors import CopyprofError
from copyprof.models import PRESETS, layout_from_config

_SUMMARY_KEYS = ("model_type", "architectures", "num_hidden_layers", "hidden_size", "num_attention_heads",
                 "num_key_value_heads", "intermediate_size", "vocab_size", "max_position_embeddings", "torch_dtype")


@dataclass(frozen=True)
class ResolvedModel:
    """What vLLM gets as ``--model`` and what run.json records about it."""

    arg: str
    name: str
    kind: str  # "preset" | "directory" | "id"
    summary: dict[str, Any]
    vocab_size: int | None

    @property
    def max_positions(self) -> int | None:
        """The config's ``max_position_embeddings`` (None where no config was read)."""
        value = self.summary.get("max_position_embeddings")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def resolve_model(spec: str) -> ResolvedModel:
    key = spec.lower()
    if key in PRESETS:
        layout = PRESETS[key]
        if not layout.hf_id:
            raise CopyprofError(f"preset {spec!r} has no Hugging Face id")
        return ResolvedModel(layout.hf_id, layout.name, "preset", _layout_summary(layout), None)
    if os.path.isdir(spec):
        path = os.path.join(spec, "config.json")
        try:
            with open(path, "rb") as fh:
                config = json.load(fh)
        except FileNotFoundError as exc:
            raise CopyprofError("model directory has no config.json", path=spec) from exc
        except (OSError, ValueError) as exc:
            raise CopyprofError(f"cannot read model config: {exc}", path=path) from exc
        if not isinstance(config, dict):
            raise CopyprofError("config.json does not hold a JSON object", path=path)
        text: dict[str, Any] = config["text_config"] if isinstance(config.get("text_config"), dict) else config
        summary = {k: text.get(k, config.get(k)) for k in _SUMMARY_KEYS if k in text or k in config}
        if isinstance((text.get("linear_attn_config") or {}).get("kda_layers"), list):
            summary.update(_layout_summary(layout_from_config(config, name=os.path.basename(spec), source=path)))
        vocab = text.get("vocab_size") or config.get("vocab_size")
        name = os.path.basename(os.path.abspath(spec).rstrip(os.sep))
        return ResolvedModel(os.path.abspath(spec), name, "directory", summary,
                             int(vocab) if isinstance(vocab, int) else None)
    if os.path.exists(spec):
        raise CopyprofError("--model must be a preset, a model directory or a hub id, not a file", path=spec)
    return ResolvedModel(spec, spec.rsplit("/", 1)[-1], "id", {}, None)


def _layout_summary(layout: Any) -> dict[str, Any]:
    return {"name": layout.name, "hf_id": layout.hf_id, "num_hidden_layers": layout.layers,
            "hidden_size": layout.hidden, "mla_layers": len(layout.mla_layers), "kda_layers": len(layout.kda_layers)}


@dataclass(frozen=True)
class Arm:
    """One side of an A/B: a label and the Python of the vLLM environment to measure."""

    label: str
    python: str


def schedule(arms: list[Arm], repeat: int, interleave: bool) -> list[tuple[Arm, int]]:
    """The order of runs as (arm, repeat index).

    One arm: ``repeat`` runs. Several arms without ``interleave``: all A, then all B, ... With
    ``interleave``: each round runs every arm once, in order on even rounds and reversed on odd
    ones — ABBA ABBA for two arms, ABC CBA for three — so a linear drift cancels in each
    candidate's difference from the baseline over every two rounds.
    """
    if repeat < 1:
        raise CopyprofError("--repeat must be >= 1")
    if len(arms) == 1:
        if interleave:
            raise CopyprofError("--interleave needs a second arm (--python-b/--label-b)")
        return [(arms[0], i) for i in range(repeat)]
    if not interleave:
        return [(a, i) for a in arms for i in range(repeat)]
    order: list[tuple[Arm, int]] = []
    for i in range(repeat):
        order += [(a, i) for a in (arms if i % 2 == 0 else arms[::-1])]
    return order

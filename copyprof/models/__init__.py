"""Model layouts: the kind of every decoder layer, from a preset or a Hugging Face config.json."""
from __future__ import annotations

from copyprof.models.from_config import layout_from_config, text_config
from copyprof.models.layout import DTYPE_BYTES, ModelLayout, kind_label
from copyprof.models.presets import PRESETS, PUBLISHED, load_layout

__all__ = ["DTYPE_BYTES", "PRESETS", "PUBLISHED", "ModelLayout", "kind_label", "layout_from_config", "load_layout", "text_config"]

"""The replica's torch and device, shared by the engine and the copy micro-capture.

torch is imported on use: copyprof's readers and reports never need it, and a machine without
torch gets a one-line error naming what to install instead of an ImportError.
"""
from __future__ import annotations

import os
import platform
from typing import Any

from copyprof.errors import EXIT_CAPTURE_FAILED, CopyprofError


def import_torch() -> Any:
    """torch, or a one-line error saying how to install it."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised only without torch
        raise CopyprofError("the replica engine needs torch: pip install 'copyprof[replica]'",
                            exit_code=EXIT_CAPTURE_FAILED) from exc
    return torch


def device_info(torch: Any, device: Any) -> dict[str, Any]:
    """Name and capability of the device the replica ran on (for run.json / timing.json)."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {
            "type": "cuda", "name": torch.cuda.get_device_name(device),
            "capability": list(torch.cuda.get_device_capability(device)),
            "multiprocessors": props.multi_processor_count, "total_memory_bytes": props.total_memory,
        }
    return {"type": "cpu", "name": platform.processor() or platform.machine(), "capability": None,
            "cpu_count": os.cpu_count()}

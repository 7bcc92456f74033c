"""Device facts as data: peak HBM bandwidth and compute-unit counts by product name.

Peak bandwidths are vendor datasheet figures (GB/s); they are used only to say whether a
copy is launch-bound or bandwidth-bound, never to compute removable time.
"""
from __future__ import annotations

from typing import Any

# (substring of the device name, peak GB/s). First match wins: keep specific names first.
PEAK_GBPS: tuple[tuple[str, float], ...] = (
    ("H200", 4800.0),  # NVIDIA H200 SXM datasheet: 4.8 TB/s
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),  # H100 SXM: 3.35 TB/s
    ("B200", 8000.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100", 1555.0),
    ("MI355X", 8000.0),  # AMD Instinct MI355X / MI350X: 8 TB/s HBM3E
    ("MI350X", 8000.0),
    ("MI325X", 6000.0),
    ("MI300X", 5300.0),
    ("MI250X", 3277.0),
    ("MI250", 3277.0),
)
# gfx targets when the trace carries only the ISA name (rocprofv3 agents: name "gfx950").
GFX_PEAK_GBPS: dict[str, float] = {"gfx950": 8000.0, "gfx942": 5300.0, "gfx90a": 3277.0}


def peak_gbps(devices: list[dict[str, Any]]) -> float | None:
    for dev in devices:
        name = str(dev.get("product_name") or dev.get("name") or "")
        for key, gbps in PEAK_GBPS:
            if key in name:
                return gbps
        arch = str(dev.get("arch") or dev.get("name") or "")
        if arch in GFX_PEAK_GBPS:
            return GFX_PEAK_GBPS[arch]
    return None


def device_cus(devices: list[dict[str, Any]]) -> int | None:
    """Compute units of the first AMD GPU (bounds the rocclr blit grid), else None."""
    for dev in devices:
        cus = dev.get("cus")
        if isinstance(cus, int) and cus > 0:
            return cus
    return None


def device_label(devices: list[dict[str, Any]]) -> str:
    for dev in devices:
        name = dev.get("product_name") or dev.get("name")
        if name:
            arch = dev.get("arch")
            return f"{name} ({arch})" if arch and arch not in str(name) else str(name)
    for dev in devices:
        if dev.get("arch"):
            return f"unnamed GPU ({dev['arch']})"
    return "unknown device"

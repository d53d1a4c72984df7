"""The CPU: its backend record, its name and its readings (psutil and ``/proc``)."""

from __future__ import annotations

import platform
import resource
import sys
from typing import Any

from .monitor import reading
from .record import Backend, DeviceCalls, Monitoring, TrainingPolicy, noop


def name(index: int = 0) -> str:
    """The processor's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        return platform.processor() or platform.machine() or "cpu"


def memory(index: int) -> dict[str, int]:
    """This process's memory: allocated is its RSS, peak its peak RSS, total the system's."""
    import psutil

    rss = int(psutil.Process().memory_info().rss)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB
    # ru_maxrss is updated lazily by the kernel: the peak is at least the current RSS
    return {
        "allocated": rss,
        "peak": max(rss, int(peak)),
        "total": int(psutil.virtual_memory().total),
    }


def _temperature() -> float | None:
    """The package temperature where the OS exposes one (psutil: Linux and FreeBSD only)."""
    import psutil

    try:
        sensors = psutil.sensors_temperatures()
    except (AttributeError, OSError):  # no such function on this platform, or no /sys access
        return None
    for chip in ("coretemp", "k10temp", "zenpower", "cpu_thermal", "cpu-thermal", "acpitz"):
        if sensors.get(chip):
            return float(sensors[chip][0].current)  # coretemp's first entry is the whole package
    return None


def monitor() -> list[dict[str, Any]]:
    """The CPU as one device: system-wide utilisation since the previous call, system memory."""
    import psutil

    mem = psutil.virtual_memory()
    # interval=None: the utilisation since the last call, without blocking (0.0 on the first)
    return [
        reading(
            "cpu",
            0,
            name(),
            util_pct=psutil.cpu_percent(interval=None),
            mem_used=mem.used,
            mem_total=mem.total,
            temp_c=_temperature(),
        )
    ]


RECORD = Backend(
    kind="cpu",
    title="CPU",
    torch_device="cpu",
    calls=DeviceCalls(
        available=lambda: True,
        count=lambda: 1,
        name=name,
        memory=memory,
        total_memory=lambda i: memory(i)["total"],
        reset_peak=noop,  # the peak RSS of a process cannot be reset
        synchronize=noop,
        mark_step=noop,
        precision=lambda i: "fp32",  # bf16 autocast on most CPUs is slower than fp32
    ),
    policy=TrainingPolicy(
        dist_backend="gloo",
        compile_backend=None,
        optimizer="adamw_torch_fused",  # torch's AdamW, fused kernel: CPU support since torch 2.4
        log_interval_s=0.0,  # the CPU computes as the host asks: reading the loss waits for nothing
    ),
    monitoring=Monitoring(monitor=monitor, driver_version=lambda: (None, "none on a cpu")),
)

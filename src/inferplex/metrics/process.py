"""Server-wide resource readings: this process's CPU time and RSS, the machine's CPU and
memory (Linux ``/proc``), and GPUs through NVML when ``nvidia-ml-py`` is installed and a
driver answers. Every reading is optional: what a platform cannot tell is left out, never
guessed, and nothing here raises."""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_PROC = Path("/proc")


def process_cpu_seconds() -> float:
    """User + system CPU seconds of this process (all threads)."""
    times = os.times()
    return times.user + times.system


def process_rss_bytes() -> int | None:
    """Resident set size of this process, or None where /proc is missing."""
    try:
        fields = (_PROC / "self" / "statm").read_text().split()
    except OSError:
        return None
    return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")


def system_cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot, or None where /proc is missing."""
    try:
        with (_PROC / "stat").open() as stat:
            values = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already part of user time
    return total - idle, total


def system_memory_bytes() -> tuple[int, int] | None:
    """(total, used) bytes of the machine's memory, or None where /proc is missing."""
    info: dict[str, int] = {}
    try:
        for line in (_PROC / "meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            info[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if "MemTotal" not in info or "MemAvailable" not in info:
        return None
    return info["MemTotal"], info["MemTotal"] - info["MemAvailable"]


@dataclass(frozen=True, slots=True)
class GpuReading:
    uuid: str
    index: int
    utilization: float  # 0..1 over the driver's last sample period
    memory_total: int
    memory_used: int
    power_watts: float | None


class GpuProbe:
    """Reads every GPU through NVML. Without the package, a driver or a GPU it reads nothing."""

    def __init__(self, enabled: bool = True) -> None:
        """``enabled`` False: NVML is never opened and nothing is read (no GPU metrics)."""
        self._nvml: Any = None
        self._handles: list[tuple[int, str, Any]] = []
        if not enabled:
            return
        try:
            import pynvml  # the nvidia-ml-py package; optional
        except ImportError:
            return
        try:
            pynvml.nvmlInit()
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                self._handles.append(
                    (index, uuid if isinstance(uuid, str) else uuid.decode(), handle)
                )
        except Exception as exc:  # no driver, no GPU: a CPU machine, not an error
            logger.debug("NVML not available: %s", exc)
            self._handles = []
            return
        self._nvml = pynvml

    @property
    def available(self) -> bool:
        return bool(self._handles)

    def read(self) -> list[GpuReading]:
        nvml = self._nvml
        readings: list[GpuReading] = []
        for index, uuid, handle in self._handles:
            try:
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception as exc:
                logger.debug("NVML reading of GPU %d failed: %s", index, exc)
                continue
            power = None
            with contextlib.suppress(Exception):  # not every board reports power
                power = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            readings.append(
                GpuReading(uuid, index, rates.gpu / 100.0, memory.total, memory.used, power)
            )
        return readings

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None
            self._handles = []

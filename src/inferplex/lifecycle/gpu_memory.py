"""GPU memory of loaded models, per device: ``--gpu-memory-limit 0=8GiB,1=4GiB``.

The host budget (memory.py) counts every model; a GPU's budget counts the models whose
instances run on that GPU (``KIND_GPU`` instances with that ``device_id``; CPU instances never
count). A version's footprint on a GPU is the growth of the memory in use on that device
while its instances are created and warmed up, measured like the host footprint (loads run
one at a time). The device figure comes from NVML (the ``nvml`` extra, nvidia-ml-py) if it
finds the GPUs, else from ``torch.cuda.mem_get_info`` where torch has CUDA; without either
there is no GPU and the budget does nothing. The device counts every process's memory, so
another process allocating during a load is counted too (and one freeing is subtracted).

Before a load, idle models are evicted from each GPU the new version will use, least
recently used first, until its estimate fits (its last measured footprint, else its files'
size per instance on that GPU); pinned, busy and loading models stay; when even that cannot
make room the load fails (429) and nothing is evicted.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from inferplex.backends.base import InstanceSpec
from inferplex.errors import ConfigError
from inferplex.lifecycle.memory import Resident, choose_evictions

logger = logging.getLogger(__name__)

FLAG = "--gpu-memory-limit"


class DeviceProbe(Protocol):
    """Memory in use on each GPU, numbered as CUDA numbers them (``device_id``)."""

    name: str

    def count(self) -> int:
        """How many GPUs this process sees."""
        ...

    def used(self, device: int) -> int:
        """Bytes in use on GPU ``device`` (by every process)."""
        ...


class NvmlProbe:
    """Reads device memory through NVML. CUDA numbers the devices CUDA_VISIBLE_DEVICES
    lists (indices or UUIDs) in that order; NVML numbers every GPU in PCI bus order
    (the same as CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID)."""

    name = "nvml"

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        every = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self._handles = _visible(every, os.environ.get("CUDA_VISIBLE_DEVICES"), nvml)

    def count(self) -> int:
        return len(self._handles)

    def used(self, device: int) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handles[device]).used)


def _visible(handles: list[Any], visible: str | None, nvml: Any) -> list[Any]:
    """The handles CUDA_VISIBLE_DEVICES leaves visible, in its order (CUDA stops at the
    first entry it cannot resolve, and so does this)."""
    if visible is None:
        return handles
    uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
    chosen: list[Any] = []
    for entry in (e.strip() for e in visible.split(",")):
        if entry.isdigit() and int(entry) < len(handles):
            chosen.append(handles[int(entry)])
            continue
        matches = [h for h, uuid in zip(handles, uuids, strict=True) if uuid.startswith(entry)]
        if not entry or len(matches) != 1:
            break
        chosen.append(matches[0])
    return chosen


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode()


class TorchProbe:
    """Reads device memory through ``torch.cuda.mem_get_info`` (creates a CUDA context on
    each device it reads)."""

    name = "torch.cuda"

    def __init__(self, torch: Any) -> None:
        self._cuda = torch.cuda

    def count(self) -> int:
        return int(self._cuda.device_count())

    def used(self, device: int) -> int:
        free, total = self._cuda.mem_get_info(device)
        return int(total - free)


def open_probe() -> DeviceProbe | None:
    """NVML where nvidia-ml-py is installed and finds a GPU, else torch.cuda where torch
    has CUDA and a GPU, else None: no GPU. Blocking (loads libraries): call it off the loop."""
    try:
        import pynvml  # the nvidia-ml-py package (the nvml extra)

        pynvml.nvmlInit()
        probe = NvmlProbe(pynvml)
        if probe.count():
            return probe
    except Exception as exc:  # not installed, no driver: try torch, then there is no GPU
        logger.debug("NVML cannot read GPU memory: %s", exc)
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count():
            return TorchProbe(torch)
    except Exception as exc:
        logger.debug("torch cannot read GPU memory: %s", exc)
    return None


#: per version: GPU -> bytes
DeviceBytes = dict[int, int]


class GpuMemory:
    """The per-GPU budgets and what each loaded model takes on each GPU. Inactive (every
    method a no-op) without limits or without a GPU."""

    def __init__(self, limits: Mapping[int, int], probe: DeviceProbe | None = None) -> None:
        self.limits = {device: int(limit) for device, limit in limits.items() if limit}
        self.probe = probe
        #: model -> served version -> GPU -> bytes
        self._served: dict[str, dict[int, DeviceBytes]] = {}
        #: measured by a load that has not switched yet: (model, version) -> GPU -> bytes
        self._pending: dict[tuple[str, int], DeviceBytes] = {}
        #: the last measurement of each version, the estimate of its next load
        self._last: dict[tuple[str, int], DeviceBytes] = {}

    @property
    def active(self) -> bool:
        return bool(self.limits) and self.probe is not None

    def check_devices(self) -> None:
        """At start: ConfigError for a limit on a GPU that is not there; without any GPU the
        limits do nothing (logged). Blocking (the first reading of a GPU may set up a CUDA
        context): call it off the event loop."""
        if not self.limits:
            return
        if self.probe is None:
            logger.warning("%s is set but there is no GPU here: it has no effect", FLAG)
            return
        count = self.probe.count()
        missing = sorted(d for d in self.limits if d >= count)
        if missing:
            raise ConfigError(
                f"{FLAG}: no GPU {', '.join(map(str, missing))} here; this process sees "
                f"{count} GPU(s), numbered 0 to {count - 1} (CUDA's numbering)"
            )
        probe = self.probe
        logger.info(
            "GPU memory limits (%s, read through %s): %s",
            FLAG,
            probe.name,
            ", ".join(
                f"GPU {d} {limit} bytes ({probe.used(d)} in use now)"
                for d, limit in sorted(self.limits.items())
            ),
        )

    # -- measuring ------------------------------------------------------------------------------
    def devices(self, specs: Sequence[InstanceSpec]) -> dict[int, int]:
        """GPU -> how many of ``specs`` run on it (CPU instances do not count)."""
        counts: dict[int, int] = {}
        for spec in specs:
            if spec.kind == "KIND_GPU":
                counts[spec.device_id] = counts.get(spec.device_id, 0) + 1
        return counts

    def before(self, specs: Sequence[InstanceSpec]) -> DeviceBytes:
        """The memory in use on the limited GPUs ``specs`` run on, before their instances
        exist ({} when it cannot be read: the load goes on, unmeasured)."""
        return self._read(d for d in self.devices(specs) if d in self.limits)

    def measured(self, model: str, version: int, before: DeviceBytes) -> None:
        """The instances of ``version`` exist and are warm: record its growth on each GPU
        (counted once the load switches to it, see ``publish``)."""
        after = self._read(before)
        if not before or after.keys() != before.keys():
            return
        growth = {device: max(0, after[device] - used) for device, used in before.items()}
        self._pending[(model, version)] = self._last[(model, version)] = growth

    def _read(self, devices: Iterable[int]) -> DeviceBytes:
        probe = self.probe
        if not self.active or probe is None:
            return {}
        try:
            return {device: probe.used(device) for device in devices}
        except Exception as exc:  # a driver hiccup must not fail the load it measures
            logger.warning("cannot read GPU memory through %s: %s", probe.name, exc)
            return {}

    def estimate(
        self,
        model: str,
        versions: Iterable[int],
        sizes: Mapping[int, int],
        specs: Sequence[InstanceSpec],
    ) -> DeviceBytes:
        """GPU -> bytes that loading ``versions`` (files of ``sizes`` bytes) will take: each
        version's last measured footprint, else its size once per instance on that GPU."""
        if not self.active:
            return {}
        devices = {d: n for d, n in self.devices(specs).items() if d in self.limits}
        total: DeviceBytes = {}
        for version in versions:
            guess = self._last.get((model, version)) or {
                device: sizes[version] * count for device, count in devices.items()
            }
            for device, size in guess.items():
                total[device] = total.get(device, 0) + size
        return total

    # -- accounting -----------------------------------------------------------------------------
    def publish(self, model: str, versions: Iterable[int], loaded: Iterable[int]) -> None:
        """``model`` now serves ``versions``, of which it just ``loaded`` some: those count
        as measured from here, the kept ones go on counting, replaced ones stop."""
        served = self._served.get(model, {})
        fresh = set(loaded)
        now: dict[int, DeviceBytes] = {}
        for version in versions:
            footprint = (
                self._pending.get((model, version)) if version in fresh else served.get(version)
            )
            if footprint:
                now[version] = footprint
        self._drop_pending(model)
        if now:
            self._served[model] = now
        else:
            self._served.pop(model, None)

    def release(self, model: str) -> None:
        """``model`` was unloaded: nothing of it counts any more."""
        self._served.pop(model, None)
        self._drop_pending(model)

    def _drop_pending(self, model: str) -> None:
        for key in [k for k in self._pending if k[0] == model]:
            del self._pending[key]

    def footprint(self, model: str, device: int) -> int:
        """Bytes ``model``'s served versions take on GPU ``device``."""
        return sum(v.get(device, 0) for v in self._served.get(model, {}).values())

    # -- eviction -------------------------------------------------------------------------------
    def evictions(
        self, needed: Mapping[int, int], residents: Sequence[Resident], model: str
    ) -> tuple[list[Resident], str]:
        """The idle models to unload so that ``needed`` (GPU -> bytes) fits into each GPU's
        limit, for the first GPU that needs any, with the budget's name for the reason;
        ([], "") when everything fits. InsufficientMemoryError when some GPU cannot make
        room: checked for every GPU before anything is evicted."""
        if not self.active:
            return [], ""
        chosen: list[tuple[list[Resident], str]] = []
        for device, limit in sorted(self.limits.items()):
            on_device = [
                dataclasses.replace(r, footprint=self.footprint(r.name, device)) for r in residents
            ]
            budget = f"{FLAG}, GPU {device}"
            victims = choose_evictions(
                limit,
                needed.get(device, 0),
                [r for r in on_device if r.footprint],
                model,
                budget,
            )
            if victims:
                chosen.append((victims, budget))
        return chosen[0] if chosen else ([], "")

    def report(self) -> list[dict[str, Any]]:
        """Each limited GPU: its limit, the loaded models' bytes on it and the device's use."""
        if not self.active or self.probe is None:
            return []
        rows = []
        for device, limit in sorted(self.limits.items()):
            models = {
                name: self.footprint(name, device)
                for name in sorted(self._served)
                if self.footprint(name, device)
            }
            rows.append(
                {
                    "device": device,
                    "limit": limit,
                    "used": sum(models.values()),
                    "device_used": self._read([device]).get(device),  # None: unreadable
                    "models": models,
                }
            )
        return rows

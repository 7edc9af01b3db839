"""Per-GPU memory budgets (--gpu-memory-limit): measuring, accounting and eviction decisions
with an injected device probe (no GPU here), the flag, and that it does nothing without a GPU."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from examples import modelgen
from inferplex.backends.base import InstanceSpec
from inferplex.cli.main import main
from inferplex.config.server_config import ServerConfig
from inferplex.core.registry import ModelRegistry
from inferplex.errors import ConfigError, InsufficientMemoryError
from inferplex.lifecycle.gpu_memory import GpuMemory, NvmlProbe
from inferplex.lifecycle.loader import ModelLoader
from inferplex.lifecycle.memory import Resident
from inferplex.server import build_engine

GPU0, GPU1 = InstanceSpec("KIND_GPU", 0), InstanceSpec("KIND_GPU", 1)
CPU = InstanceSpec("KIND_CPU", 0)


class Probe:
    """Device memory that the test sets: stands in for NVML in the accounting tests."""

    name = "test"

    def __init__(self, count: int = 2) -> None:
        self.in_use = dict.fromkeys(range(count), 0)

    def count(self) -> int:
        return len(self.in_use)

    def used(self, device: int) -> int:
        return self.in_use[device]


def load(gpu: GpuMemory, probe: Probe, model: str, version: int, grows: dict[int, int]) -> None:
    """What the loader does around one version's load, with the device growing by ``grows``."""
    specs = [InstanceSpec("KIND_GPU", device) for device in grows]
    before = gpu.before(specs)
    for device, size in grows.items():
        probe.in_use[device] += size
    gpu.measured(model, version, before)
    gpu.publish(model, [version], [version])


def idle(name: str, last_used: float, why_kept: str = "") -> Resident:
    return Resident(name, 1, last_used, not why_kept, why_kept)


def test_only_gpu_instances_count() -> None:
    gpu = GpuMemory({0: 1000}, Probe())
    assert gpu.devices([GPU0, GPU0, GPU1, CPU]) == {0: 2, 1: 1}
    assert gpu.before([CPU]) == {}  # a CPU model is not measured on any GPU
    probe = Probe()
    gpu = GpuMemory({0: 1000}, probe)
    before = gpu.before([CPU])
    probe.in_use[0] += 500  # someone else's allocation while a CPU model loads
    gpu.measured("cpu_model", 1, before)
    gpu.publish("cpu_model", [1], [1])
    assert gpu.footprint("cpu_model", 0) == 0


def test_gpus_without_a_limit_or_unreadable_are_not_measured(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gpu = GpuMemory({0: 1000}, Probe(1))
    assert gpu.before([GPU1]) == {}  # no limit on GPU 1 (and not even there): not read
    assert gpu.estimate("a", [1], {1: 10}, [GPU1]) == {}

    class Lost(Probe):
        def used(self, device: int) -> int:
            raise RuntimeError("GPU is lost")

    gpu = GpuMemory({0: 1000}, Lost())
    with caplog.at_level(logging.WARNING):
        assert gpu.before([GPU0]) == {}  # the load goes on, unmeasured
    assert "cannot read GPU memory through test: GPU is lost" in caplog.text


def test_growth_counts_once_the_load_switches() -> None:
    probe = Probe()
    gpu = GpuMemory({0: 1000, 1: 1000}, probe)
    before = gpu.before([GPU0, GPU1])
    probe.in_use[0] += 300
    probe.in_use[1] += 100
    gpu.measured("a", 1, before)
    assert gpu.footprint("a", 0) == 0  # measured, not switched to yet
    gpu.publish("a", [1], [1])
    assert (gpu.footprint("a", 0), gpu.footprint("a", 1)) == (300, 100)
    load(gpu, probe, "a", 2, {0: 50})  # version 2 loads; version 1 stops serving
    assert gpu.footprint("a", 0) == 50 and gpu.footprint("a", 1) == 0
    gpu.publish("a", [1, 2], [1])  # a reload of version 1 that failed to measure: kept 2
    assert gpu.footprint("a", 0) == 50
    gpu.release("a")
    assert gpu.footprint("a", 0) == 0
    assert [row["models"] for row in gpu.report()] == [{}, {}]


def test_estimate_is_the_last_footprint_else_the_size_per_instance() -> None:
    probe = Probe()
    gpu = GpuMemory({0: 10_000, 1: 10_000}, probe)
    assert gpu.estimate("a", [1], {1: 400}, [GPU0, GPU0, GPU1, CPU]) == {0: 800, 1: 400}
    load(gpu, probe, "a", 1, {0: 650})
    gpu.release("a")
    assert gpu.estimate("a", [1], {1: 400}, [GPU0, GPU0]) == {0: 650}


def test_least_recently_used_idle_models_of_that_gpu_go_first() -> None:
    probe = Probe()
    gpu = GpuMemory({0: 1000, 1: 1000}, probe)
    load(gpu, probe, "a", 1, {0: 200})
    load(gpu, probe, "b", 1, {0: 300})
    load(gpu, probe, "c", 1, {1: 900})  # on the other GPU: never a victim for GPU 0
    residents = [idle("c", 0.0), idle("a", 1.0), idle("b", 2.0)]
    assert gpu.evictions({0: 400}, residents, "new") == ([], "")
    victims, budget = gpu.evictions({0: 600}, residents, "new")
    assert [v.name for v in victims] == ["a"] and victims[0].footprint == 200
    assert budget == "--gpu-memory-limit, GPU 0"
    victims, _ = gpu.evictions({0: 900}, residents, "new")
    assert [v.name for v in victims] == ["a", "b"]
    victims, budget = gpu.evictions({1: 200}, residents, "new")
    assert [v.name for v in victims] == ["c"] and budget == "--gpu-memory-limit, GPU 1"


def test_pinned_and_busy_models_stay_and_the_error_names_the_gpu() -> None:
    probe = Probe()
    gpu = GpuMemory({0: 1000}, probe)
    load(gpu, probe, "pinned", 1, {0: 500})
    load(gpu, probe, "busy", 1, {0: 300})
    residents = [idle("pinned", 0.0, "pinned"), idle("busy", 0.0, "requests in flight")]
    with pytest.raises(InsufficientMemoryError) as caught:
        gpu.evictions({0: 400}, residents, "new")
    message = caught.value.message
    assert "cannot load model 'new': it needs about 400 bytes" in message
    assert "limit is 1000 bytes (--gpu-memory-limit, GPU 0)" in message
    assert "'pinned' 500 B (pinned)" in message and "'busy' 300 B (requests in flight)" in message


def test_every_gpu_is_checked_before_anything_is_evicted() -> None:
    probe = Probe()
    gpu = GpuMemory({0: 1000, 1: 1000}, probe)
    load(gpu, probe, "idle0", 1, {0: 800})
    load(gpu, probe, "pinned1", 1, {1: 800})
    residents = [idle("idle0", 0.0), idle("pinned1", 0.0, "pinned")]
    # GPU 0 could make room by evicting idle0, GPU 1 cannot: an error, no victim
    with pytest.raises(InsufficientMemoryError, match="GPU 1"):
        gpu.evictions({0: 500, 1: 500}, residents, "new")


def test_without_limits_or_without_a_gpu_nothing_happens() -> None:
    for gpu in (GpuMemory({0: 1000}), GpuMemory({}, Probe()), GpuMemory({0: 0}, Probe())):
        assert not gpu.active
        assert gpu.before([GPU0]) == {}
        assert gpu.estimate("a", [1], {1: 10**12}, [GPU0]) == {}
        assert gpu.evictions({0: 10**12}, [idle("a", 0.0)], "new") == ([], "")
        assert gpu.report() == []


def test_a_limit_for_a_gpu_that_is_not_there(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfigError) as caught:
        GpuMemory({0: 10, 3: 10, 5: 10}, Probe(2)).check_devices()
    assert "--gpu-memory-limit: no GPU 3, 5 here" in caught.value.message
    assert "sees 2 GPU(s), numbered 0 to 1" in caught.value.message
    GpuMemory({1: 10}, Probe(2)).check_devices()
    with caplog.at_level(logging.WARNING):
        GpuMemory({0: 10}).check_devices()  # no GPU: accepted, does nothing
    assert "there is no GPU here: it has no effect" in caplog.text


class Nvml:
    """NVML's calls as NvmlProbe makes them, over three GPUs."""

    UUIDS = ("GPU-aaa1", "GPU-bbb2", "GPU-ccc3")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.UUIDS)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return self.UUIDS[handle].encode()

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(used=(handle + 1) * 1000)


@pytest.mark.parametrize(
    ("visible", "used"),
    [
        (None, [1000, 2000, 3000]),
        ("2,0", [3000, 1000]),
        ("GPU-bbb,1", [2000, 2000]),
        ("1,7,0", [2000]),  # CUDA stops at the first device it cannot find
        ("", []),
    ],
)
def test_nvml_numbers_gpus_as_cuda_does(
    monkeypatch: pytest.MonkeyPatch, visible: str | None, used: list[int]
) -> None:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    probe = NvmlProbe(Nvml())
    assert [probe.used(d) for d in range(probe.count())] == used


async def test_the_loader_evicts_for_the_gpu_and_says_why(tmp_path: Path) -> None:
    registry = ModelRegistry()
    probe = Probe()
    gpu = GpuMemory({0: 1000}, probe)
    loader = ModelLoader(registry, tmp_path, memory_limit=10_000, gpu_memory=gpu)
    records = loader.records
    for name, last_used in (("old", 1.0), ("recent", 2.0)):
        record = records.add(name)
        record.footprints, record.entry.last_used = {1: 100}, last_used
        load(gpu, probe, name, 1, {0: 400})
    new = records.add("new")
    await loader.budgets.make_room(new, 100, {0: 300})
    reason = "evicted to make room for 'new' (--gpu-memory-limit, GPU 0)"
    assert records.record("old").reason == registry.entry("old").reason == reason
    assert gpu.footprint("old", 0) == 0 and gpu.footprint("recent", 0) == 400
    records.record("recent").pinned = True
    with pytest.raises(InsufficientMemoryError, match="GPU 0"):
        await loader.budgets.make_room(new, 100, {0: 700})
    assert records.record("recent").footprints  # nothing evicted


def test_the_flag_and_its_environment_variable(tmp_path: Path) -> None:
    config = ServerConfig(model_repository=tmp_path, gpu_memory_limit="0=8GiB, 1=1.5GB")
    assert config.gpu_memory_limit == {0: 8 << 30, 1: 1_500_000_000}
    assert ServerConfig(model_repository=tmp_path).gpu_memory_limit == {}
    json_env = ServerConfig(model_repository=tmp_path, gpu_memory_limit='{"2": "1KiB"}')
    assert json_env.gpu_memory_limit == {2: 1024}
    base = ["serve", "--model-repository", str(tmp_path)]
    for value, fragment in [
        ("0=lots", "gpu_memory_limit.0: could not parse value and unit"),
        ("gpu0=1GiB", "gpu_memory_limit.gpu0.[key]: Input should be a valid integer"),
        ("-1=1GiB", "greater than or equal to 0"),
        ("8GiB", "'8GiB' is not GPU=SIZE (expected e.g. 0=8GiB,1=4GiB)"),
        ("0=1GiB,0=2GiB", "GPU 0 is given twice"),
    ]:
        result = CliRunner().invoke(main, [*base, "--gpu-memory-limit", value])
        assert result.exit_code == 2 and fragment in result.output, result.output
    result = CliRunner().invoke(main, base, env={"INFERPLEX_GPU_MEMORY_LIMIT": "0=lots"})
    assert result.exit_code == 2 and "gpu_memory_limit.0" in result.output


async def test_no_effect_on_models_without_gpu_instances(tmp_path: Path) -> None:
    """A tiny GPU limit does not touch a CPU model, with a GPU (the model stays on the CPU)
    or without one (the limit does nothing)."""
    modelgen.add_sub(tmp_path)
    config = ServerConfig(model_repository=tmp_path, gpu_memory_limit="0=1KiB")
    engine = build_engine(config)
    await engine.start()
    try:
        assert engine.model_ready("add_sub", "")
        assert all(row["models"] == {} for row in engine.memory()["gpus"])
    finally:
        await engine.stop()


def test_a_limit_for_a_missing_gpu_stops_the_server_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("inferplex.lifecycle.manager.open_probe", lambda: Probe(1))
    # the root logger keeps its handlers: serve's would write to the runner's closed stream
    monkeypatch.setattr("inferplex.cli.main.configure_logging", lambda *args: None)
    args = ["serve", "--model-repository", str(tmp_path), "--gpu-memory-limit", "0=1GiB,3=1GiB"]
    ports = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    result = CliRunner().invoke(main, [*args, *ports])
    assert result.exit_code == 2, result.output
    assert "error: --gpu-memory-limit: no GPU 3 here; this process sees 1 GPU(s)" in result.output

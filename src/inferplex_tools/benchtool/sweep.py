"""One bench run: every model at every load level, against one server.

For each model it reads the metadata and configuration, synthesises and pre-encodes one
request, and sends it once as a probe (the answer's outputs are checked against the
metadata: a server that answers wrongly cannot look fast). Then, level by level, it measures
the load (:mod:`.load`) and, when the server advertises the statistics extension, reads each
model's statistics at every window boundary for the server-side breakdown. A model that
fails is recorded in the compatibility report and skipped; the others go on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.breakdown import breakdown, pick
from inferplex_tools.benchtool.clients import GrpcClient, HttpClient, InferClient
from inferplex_tools.benchtool.compat import CompatLog
from inferplex_tools.benchtool.control import ServerApi, Unsupported, server_api
from inferplex_tools.benchtool.load import Mode, Stream, measure
from inferplex_tools.benchtool.payloads import (
    check_outputs,
    decode_grpc,
    decode_http,
    grpc_request,
    http_request,
    plan_inputs,
    synthesize,
)
from inferplex_tools.benchtool.progress import Progress
from inferplex_tools.benchtool.results import BenchReport, CaseResult
from inferplex_tools.benchtool.stats import merge


@dataclass
class BenchOptions:
    """Everything that defines a run (the ``inferplex bench`` flags)."""

    url: str
    models: list[str]
    protocol: str = "http"
    binary: bool = True
    version: str = ""
    concurrency: list[int] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    batch_size: int = 1
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    warmup: float = 1.0
    window: float = 2.0
    stability: float = 0.1
    max_windows: int = 10
    stable_count: int = 3
    together: bool = False
    """load every model at once at each level (a shared-machine workload) instead of in turn"""

    def levels(self) -> list[tuple[Mode, float]]:
        """Concurrency levels then rates; concurrency 1 when neither was given."""
        levels: list[tuple[Mode, float]] = [("concurrency", float(c)) for c in self.concurrency]
        levels += [("rate", float(r)) for r in self.rates]
        return levels or [("concurrency", 1.0)]

    @property
    def protocol_label(self) -> str:
        if self.protocol == "grpc":
            return "grpc"
        return "http-binary" if self.binary else "http-json"

    def check(self) -> None:
        """BenchError naming the first flag with a bad value."""
        if self.protocol not in ("http", "grpc"):
            raise BenchError(f"--protocol: expected http or grpc, got {self.protocol!r}")
        if not self.models:
            raise BenchError("--model: give at least one model to benchmark")
        if any(c < 1 for c in self.concurrency):
            raise BenchError(f"--concurrency: expected integers >= 1, got {self.concurrency}")
        if any(r <= 0 for r in self.rates):
            raise BenchError(f"--rate: expected requests/s > 0, got {self.rates}")
        if self.window <= 0 or self.warmup < 0:
            raise BenchError("--window must be > 0 s and --warmup >= 0 s")
        if self.stability <= 0:
            raise BenchError(
                f"--stability: expected a fraction > 0 (0.1 = ±10%), got {self.stability}"
            )
        if self.max_windows < 1 or self.stable_count < 1:
            raise BenchError("--max-windows and --stable-windows must be >= 1")
        split_address(self.url)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["shapes"] = {k: list(v) for k, v in self.shapes.items()}
        return data


def split_address(url: str) -> tuple[str, int]:
    """``host:port`` (an ``http://`` or ``grpc://`` prefix is allowed) -> (host, port)."""
    address = url.split("://", 1)[-1].rstrip("/")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise BenchError(f"--url: expected HOST:PORT such as 127.0.0.1:8000, got {url!r}")
    return host, int(port)


@dataclass
class _Prepared:
    model: str
    client: InferClient
    inputs: list[str]


async def run(
    options: BenchOptions,
    progress: Progress | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> BenchReport:
    """Benchmark every model of ``options`` at every level; ``say`` gets notes as they come."""
    options.check()
    host, port = split_address(options.url)
    compat = CompatLog()
    api = server_api(options.protocol, f"{host}:{port}", compat)
    report = BenchReport(
        target={"url": options.url, "protocol": options.protocol_label},
        options=options.to_dict(),
        started=time.time(),
    )
    prepared: list[_Prepared] = []
    try:
        report.target["server"] = api.server_metadata()
        await asyncio.to_thread(api.health, options.models)
        statistics = "statistics" in report.target["server"].get("extensions", [])
        if not statistics:
            say("the server does not advertise the statistics extension: no server breakdown")
        for model in options.models:
            try:
                prepared.append(await _prepare(api, options, host, port, model, compat))
            except BenchError as exc:
                compat.model(model, False, str(exc))
                say(f"{model}: FAILED: {exc}")
        known = {name for p in prepared for name in p.inputs}
        unknown = sorted(set(options.shapes) - known)
        if prepared and unknown:
            raise BenchError(
                f"--shape: no model of the run has an input {', '.join(unknown)} "
                f"(inputs: {', '.join(sorted(known))})"
            )
        groups = [prepared] if options.together else [[p] for p in prepared]
        levels = options.levels()
        progress = progress or Progress(0, enabled=False)
        progress.total = max(len(groups) * len(levels), 1)
        for group in groups:
            for mode, level in levels:
                live = [p for p in group if not compat.models[p.model].failed]
                if live:
                    report.results += await _measure(
                        api, options, live, mode, level, statistics, compat, progress, say
                    )
                progress.update()
        progress.close()
    finally:
        for item in prepared:
            await item.client.close()
        api.close()
    report.compat = compat.to_dict()
    return report


async def _prepare(
    api: ServerApi, options: BenchOptions, host: str, port: int, model: str, compat: CompatLog
) -> _Prepared:
    """Metadata -> inputs -> one pre-encoded request -> a checked probe answer."""
    metadata = await asyncio.to_thread(api.model_metadata, model, options.version)
    try:
        max_batch = await asyncio.to_thread(api.max_batch_size, model, options.version)
    except Unsupported:
        max_batch = 0  # a server without the configuration extension: no batch dimension
    plans = plan_inputs(metadata, max_batch, options.batch_size, options.shapes)
    inputs = synthesize(plans)
    outputs = [t["name"] for t in metadata.get("outputs", [])]
    client: InferClient
    if options.protocol == "grpc":
        client = GrpcClient(
            f"{host}:{port}", grpc_request(model, options.version, plans, inputs, outputs)
        )
        route = "grpc ModelInfer"
    else:
        request = http_request(host, model, options.version, plans, inputs, outputs, options.binary)
        client = HttpClient(host, port, request)
        route = f"http POST /v2/models/{{m}}/infer ({'binary' if options.binary else 'JSON'})"
    kinds = [f"input {p.datatype}" for p in plans] + [
        f"output {t['datatype']}" for t in metadata.get("outputs", [])
    ]
    try:
        answer = await client.call()
        got = decode_http(*answer) if isinstance(answer, tuple) else decode_grpc(answer)
        check_outputs(got, metadata.get("outputs", []))
    except BenchError as exc:
        await client.close()
        compat.endpoint(route, False, f"{model}: {exc}")
        for kind in kinds:
            compat.datatype(kind, False, f"{model}: {exc}")
        raise
    compat.endpoint(route, True)
    for kind in kinds:
        compat.datatype(kind, True)
    compat.model(model, True)
    return _Prepared(model, client, [p.name for p in plans])


async def _measure(
    api: ServerApi,
    options: BenchOptions,
    group: list[_Prepared],
    mode: Mode,
    level: float,
    statistics: bool,
    compat: CompatLog,
    progress: Progress,
    say: Callable[[str], None],
) -> list[CaseResult]:
    streams = [Stream(p.model, p.client, mode, level) for p in group]
    snapshots: list[dict[str, dict[str, Any] | None]] = []
    label = ("c=" if mode == "concurrency" else "rate=") + f"{level:g}"

    async def on_window(index: int) -> None:
        if statistics:
            snapshots.append(
                {s.name: await _statistics(api, s.name, options.version) for s in streams}
            )
        if index:
            rate = sum(s.windows[-1].throughput for s in streams)
            progress.update(
                progress.done,
                f"{','.join(s.name for s in streams)} {label} "
                f"window {index}/{options.max_windows} {rate:.0f} req/s",
            )

    try:
        outcome = await measure(
            streams,
            warmup=options.warmup,
            window=options.window,
            stability=options.stability,
            max_windows=options.max_windows,
            stable_count=options.stable_count,
            on_window=on_window,
        )
    except BenchError as exc:
        for stream in streams:
            compat.model(stream.name, False, f"{label}: {exc}")
        say(f"{', '.join(s.name for s in streams)} {label}: FAILED: {exc}")
        return []
    results = []
    for stream in streams:
        summary = merge(stream.windows[-outcome.used :])
        server = None
        if snapshots:
            before = snapshots[outcome.first_used].get(stream.name)
            after = snapshots[outcome.windows].get(stream.name)
            if before is not None and after is not None:
                server = breakdown(before, after, summary.mean_ms)
        results.append(
            CaseResult(
                model=stream.name,
                version=options.version,
                protocol=options.protocol_label,
                mode=mode,
                level=level,
                batch_size=options.batch_size,
                latency=summary.to_dict(),
                stable=outcome.stable,
                windows=outcome.windows,
                server=server,
                skipped=stream.skipped,
            )
        )
    return results


async def _statistics(api: ServerApi, model: str, version: str) -> dict[str, Any] | None:
    try:
        return pick(await asyncio.to_thread(api.model_statistics, model, version), version)
    except BenchError:
        return None

"""tritonserver flags that mean something only together: the log levels, gRPC's TLS files,
the two cache flags and the trace settings. Each flag's value is kept
under a ``_`` key by its :class:`~inferplex.cli.triton_spec.TritonFlag`; ``combine`` turns
them into ServerConfig settings, lines for the log, or a refusal."""

from __future__ import annotations

from typing import Any

import click

from inferplex.cli import triton_values

#: Triton's trace rate when none is given: one request in 1000
_TRITON_TRACE_RATE = 1000


def combine(settings: dict[str, Any], notes: list[str]) -> None:
    """Replace the ``_`` keys of ``settings`` by the ServerConfig settings they make, adding
    a line to ``notes`` for each part without effect."""
    parts = {key: settings.pop(key) for key in [k for k in settings if k.startswith("_")]}
    _log_levels(parts, settings, notes)
    _grpc_tls(parts, settings, notes)
    if "_response_cache_bytes" in parts:
        if "cache_size" in settings:
            raise click.UsageError(
                "tritonserver's --response-cache-byte-size and --cache-config both given: "
                "give one of them (as tritonserver says)"
            )
        settings["cache_size"] = parts["_response_cache_bytes"]
    _trace(parts, settings, notes)


def _log_levels(parts: dict[str, Any], settings: dict[str, Any], notes: list[str]) -> None:
    """--log-info/--log-warning/--log-error=false raise --log-level past what they turn off;
    Python's levels are a ladder, so what lies above a level stays on (said in the log)."""
    info, warning, error = (parts.get(f"_log_{k}", True) for k in ("info", "warning", "error"))
    if "log_level" not in settings and not info:  # --log-verbose (debug) keeps every level
        settings["log_level"] = "warning" if warning else "error"
    if info and not warning:
        notes.append("--log-warning=false: warnings are still logged (below them, info is on)")
    if not error:
        notes.append("--log-error=false: errors are still logged: inferplex always logs them")


def _grpc_tls(parts: dict[str, Any], settings: dict[str, Any], notes: list[str]) -> None:
    """--grpc-use-ssl[-mutual] with --grpc-server-cert/--grpc-server-key[/--grpc-root-cert]:
    TLS, on every listener (inferplex's TLS covers HTTP and gRPC together)."""
    mutual = parts.get("_grpc_ssl_mutual", False)
    files = {k: parts.get(f"_grpc_{k}") for k in ("server_cert", "server_key", "root_cert")}
    if not (parts.get("_grpc_ssl", False) or mutual):
        if any(files.values()):
            notes.append("--grpc-server-cert/-key/--grpc-root-cert: no effect without "
                         "--grpc-use-ssl=true (as in Triton)")  # fmt: skip
        return
    if not files["server_cert"] or not files["server_key"]:
        raise click.UsageError(
            "tritonserver's --grpc-use-ssl needs --grpc-server-cert and --grpc-server-key"
        )
    settings["tls_cert_file"], settings["tls_key_file"] = files["server_cert"], files["server_key"]
    if mutual:
        if not files["root_cert"]:
            raise click.UsageError("tritonserver's --grpc-use-ssl-mutual needs --grpc-root-cert")
        settings["tls_client_ca"] = files["root_cert"]
    notes.append(
        "--grpc-use-ssl: the certificate is --tls-cert-file, which serves HTTPS on the HTTP "
        "port too (inferplex's TLS covers every listener)"
    )


def _trace(parts: dict[str, Any], settings: dict[str, Any], notes: list[str]) -> None:
    """Triton's trace settings (--trace-config and the older --trace-level, --trace-rate,
    ...): a level other than OFF turns tracing on for one request in ``rate``; spans go over
    OTLP in opentelemetry mode (to its url), else to the console: inferplex writes
    OpenTelemetry spans, not Triton's trace files."""
    found = _trace_settings(parts)
    if not any(found.values()):
        return
    common = found[""]
    levels = {level.strip().lower() for level in common.get("level", "off").split(",")}
    unknown = levels - {"off", "false", "true", "on", "min", "max", "timestamps", "tensors"}
    if unknown:
        raise click.UsageError(f"tritonserver's trace level: unknown value(s) {sorted(unknown)}")
    if levels & {"off", "false"}:
        notes.append("trace settings: no effect: the trace level is OFF (Triton's default)")
        return
    rate = triton_values.integer("trace rate", common.get("rate", str(_TRITON_TRACE_RATE)))
    if rate < 1:
        raise click.UsageError(f"tritonserver's trace rate must be at least 1, got {rate}")
    settings["trace_rate"] = 1 / rate
    url = found["opentelemetry"].get("url")
    if common.get("mode", "triton").lower() == "opentelemetry":
        settings["trace_exporter"] = "otlp"
        if url:
            settings["trace_endpoint"] = url if "://" in url else f"http://{url}"
    else:
        settings["trace_exporter"] = "console"
        notes.append(
            "trace mode triton: spans are OpenTelemetry's, written to the console; inferplex "
            "writes no trace file (--trace-config mode=opentelemetry sends them over OTLP)"
        )
    if "tensors" in levels:
        notes.append("trace level TENSORS: spans carry timings, not tensors")
    if common.get("count", "-1") != "-1":
        notes.append("trace count: no effect: inferplex traces at the rate without a count")
    ignored = {k for mode in ("triton", "opentelemetry") for k in found[mode]} - {"url"}
    if ignored:
        notes.append(f"trace settings {', '.join(sorted(ignored))}: no effect in inferplex")


def _trace_settings(parts: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The trace settings given, by mode ("" for the common ones: level, rate, count,
    mode), the older flags' first and --trace-config's over them (as Triton reads them)."""
    found: dict[str, dict[str, str]] = {"": {}, "triton": {}, "opentelemetry": {}}
    for old, mode, key in (
        ("level", "", "level"),
        ("rate", "", "rate"),
        ("count", "", "count"),
        ("file", "triton", "file"),
        ("log_frequency", "triton", "log-frequency"),
    ):
        if f"_trace_{old}" in parts:
            found[mode][key] = parts[f"_trace_{old}"]
    for text in parts.get("_trace_config", ()):
        mode, key, value = triton_values.split_setting("--trace-config", text, named=False)
        if mode.lower() not in found:
            raise click.UsageError(
                f"tritonserver's --trace-config: unknown trace mode '{mode}' (triton or "
                "opentelemetry)"
            )
        found[mode.lower()][key] = value
    return found

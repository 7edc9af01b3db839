"""Every flag of `tritonserver --help` (tritonserver_flags.txt, written from Triton's option
table) starts `inferplex serve`; the ones inferplex honours set what they say, and the
ones it cannot honour without opening an API stop the start with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplex.config.server_config import ServerConfig
from tests.unit.cli.conftest import serve

FLAG_LIST = Path(__file__).with_name("tritonserver_flags.txt")
#: added as a ServerConfig field by another change of issue 31 (the drain timeout)
#: a value of the form Triton's help shows, for the flags whose form alone says too little
SAMPLES = {
    "--log-format": "ISO8601",
    "--model-control-mode": "explicit",
    "--http-address": "127.0.0.1",
    "--grpc-address": "127.0.0.1",
    "--metrics-address": "127.0.0.1",
    "--rate-limit": "execution_count",
    "--grpc-infer-response-compression-level": "low",
    "--trace-level": "TIMESTAMPS",
    "--http-restricted-api": "metadata,inference,shared-memory,model-config,model-repository,"
    "statistics,trace,logging:Authorization=Bearer t0ken",
    "--grpc-restricted-protocol": "model-repository:admin-key=secret",
    "--sagemaker-safe-port-range": "8000-8010",
    "--metrics-config": "summary_latencies=true",
    "--trace-config": "rate=100",
    "--cache-config": "local,size=1048576",
    "--rate-limit-resource": "R1:4:0",
    "--cuda-memory-pool-byte-size": "0:67108864",
    "--cuda-virtual-address-size": "0:1073741824",
    "--host-policy": "gpu_0,numa-node=0",
    "--model-load-gpu-limit": "0:0.8",
    "--backend-config": "python,shm-default-byte-size=1048576",
}
BY_FORM = {"int": "20000", "float": "2000", "text": "x", "bool": "false"}


def tritonserver_flags() -> list[tuple[str, str]]:
    """(flag, what it takes) of every line of the list."""
    rows = []
    for line in FLAG_LIST.read_text().splitlines():
        if line.startswith("--"):
            name, takes, *_ = line.split()
            rows.append((name, takes))
    return rows


def test_the_list_is_tritons_whole_help() -> None:
    names = [name for name, _ in tritonserver_flags()]
    assert len(names) == len(set(names)) == 89
    assert {"--id", "--log-file", "--cache-config", "--grpc-restricted-protocol"} <= set(names)


@pytest.mark.parametrize(("flag", "takes"), tritonserver_flags())
def test_every_tritonserver_flag_starts_inferplex(
    tmp_path: Path, started: list[ServerConfig], flag: str, takes: str
) -> None:
    value = (
        {
            "--model-repository": str(tmp_path),
            "--model-store": str(tmp_path),
            "--log-file": str(tmp_path / "server.log"),
        }.get(flag)
        or SAMPLES.get(flag)
        or BY_FORM.get(takes, "x")
    )
    argument = flag if takes == "none" else f"{flag}={value}"
    result = serve(f"--model-repository={tmp_path}", argument)
    assert result.exit_code == 0, result.output
    assert len(started) == 1


def test_the_honoured_flags_set_their_settings(tmp_path: Path, started: list[ServerConfig]) -> None:
    log = tmp_path / "server.log"
    result = serve(
        f"--model-repository={tmp_path}",
        "--id=triton",
        f"--log-file={log}",
        "--log-format=ISO8601",
        "--log-info=false",
        "--strict-readiness=true",
        "--model-config-name=h100",
        "--cache-config=local,size=1048576",
        "--grpc-keepalive-time=7200000",
        "--grpc-keepalive-timeout=20000",
        "--grpc-max-connection-age=60000",
        "--grpc-max-connection-age-grace=5000",
        "--rate-limit-resource=R1:4",
        "--rate-limit-resource=R2:2:0",
        "--rate-limit-resource=R2:3:1",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=10",
        "--trace-config=mode=opentelemetry",
        "--trace-config=opentelemetry,url=localhost:4318/v1/traces",
        "--allow-gpu-metrics=false",
        "--metrics-interval-ms=2000",
        "--http-max-input-size=1048576",
    )
    assert result.exit_code == 0, result.output
    (config,) = started
    assert config.server_name == "triton"
    assert (config.log_file, config.log_format, config.log_level) == (log, "iso8601", "warning")
    assert config.strict_readiness and config.model_config_name == "h100"
    assert config.max_json_request_bytes == 1048576
    assert config.cache_size == 1048576
    assert (config.http2_keepalive_s, config.http2_keepalive_timeout_s) == (7200.0, 20.0)
    assert (config.http2_max_connection_age_s, config.http2_max_connection_age_grace_s) == (
        60.0,
        5.0,
    )
    assert config.rate_limit_resources == {"R1": 4, "R2": 5}
    assert (config.trace_rate, config.trace_exporter) == (0.1, "otlp")
    assert config.trace_endpoint == "http://localhost:4318/v1/traces"
    assert not config.gpu_metrics and config.metrics_interval_s == 2.0


def test_without_a_trace_level_tritons_trace_rate_traces_nothing(
    tmp_path: Path, started: list[ServerConfig]
) -> None:
    result = serve(f"--model-repository={tmp_path}", "--trace-rate=1000")
    assert result.exit_code == 0, result.output
    assert started[0].trace_rate == 0.0
    assert "trace level is OFF" in result.stderr
    started.clear()
    result = serve(f"--model-repository={tmp_path}", "--trace-rate=0.25")  # inferplex's own
    assert result.exit_code == 0 and started[0].trace_rate == 0.25


@pytest.mark.parametrize(
    ("args", "level"),
    [
        (("--log-verbose=true",), "debug"),
        (("--log-verbose=0",), "info"),
        (("--log-verbose", "2"), "debug"),
        (("--log-info=false", "--log-warning=false"), "error"),
        (("--log-info=false", "--log-verbose=1"), "debug"),
    ],
)
def test_log_levels_as_triton_spells_them(
    tmp_path: Path, started: list[ServerConfig], args: tuple[str, ...], level: str
) -> None:
    result = serve(f"--model-repository={tmp_path}", *args, "--model-control-mode=EXPLICIT")
    assert result.exit_code == 0, result.output
    assert started[0].log_level == level and started[0].model_control_mode == "explicit"


@pytest.mark.parametrize(
    "flags",
    [("--model-repository", "--model-repository"), ("--model-repository", "--model-store")],
)
def test_two_repositories_stop_the_start(
    tmp_path: Path, started: list[ServerConfig], flags: tuple[str, str]
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    result = serve(f"{flags[0]}={tmp_path / 'a'}", f"{flags[1]}={tmp_path / 'b'}")
    assert result.exit_code == 2 and not started
    assert "serves one model repository" in result.output
    result = serve(f"{flags[0]}={tmp_path / 'a'}", f"{flags[1]}={tmp_path / 'a'}")
    assert result.exit_code == 0 and started[0].model_repository == tmp_path / "a"


def test_defaults_stay_inferplexs(tmp_path: Path, started: list[ServerConfig]) -> None:
    result = serve(f"--model-repository={tmp_path}")
    assert result.exit_code == 0, result.output
    (config,) = started
    assert config.server_name == "inferplex" and not config.strict_readiness
    assert config.log_file is None and config.model_config_name == ""


def test_the_restricted_apis_are_kept_as_triton_writes_them(
    tmp_path: Path, started: list[ServerConfig]
) -> None:
    http = ("metadata,inference:infer-key=infer-value", "model-repository:admin-key=a=b")
    result = serve(
        f"--model-repository={tmp_path}",
        *(f"--http-restricted-api={value}" for value in http),
        "--grpc-restricted-protocol=health,inference:infer-key=infer-value",
    )
    assert result.exit_code == 0, result.output
    (config,) = started
    assert config.http_restricted_api == http
    assert config.grpc_restricted_protocol == ("health,inference:infer-key=infer-value",)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--response-cache-byte-size=10", "--cache-config=local,size=10"), "give one"),
        (("--cache-config=local",), "<name>,<setting>=<value>"),
        (("--http-restricted-api=everything:k=v",), "unknown API 'everything'"),
        (
            ("--grpc-restricted-protocol=health:k=v", "--grpc-restricted-protocol=health:j=w"),
            "'health' is in more than one group",
        ),
        (("--http-restricted-api=inference",), "<apis>:<key>=<value>"),
        (("--rate-limit=sometimes",), "execution_count or off"),
        (("--trace-config=level=LOUD",), "unknown value"),
        (("--grpc-use-ssl=true",), "needs --grpc-server-cert"),
        (("--log-format=fancy",), "fancy"),
        (("--log-verbose=loud",), "takes a number"),
    ],
)
def test_a_value_triton_refuses_is_refused(
    tmp_path: Path, started: list[ServerConfig], args: tuple[str, ...], message: str
) -> None:
    result = serve(f"--model-repository={tmp_path}", *args)
    assert result.exit_code == 2 and not started
    assert message in result.output


def test_grpc_tls_is_the_servers_tls(tmp_path: Path, started: list[ServerConfig]) -> None:
    for name in ("cert.pem", "key.pem", "ca.pem"):
        (tmp_path / name).write_text("-")
    result = serve(
        f"--model-repository={tmp_path}",
        "--grpc-use-ssl-mutual=true",
        f"--grpc-server-cert={tmp_path / 'cert.pem'}",
        f"--grpc-server-key={tmp_path / 'key.pem'}",
        f"--grpc-root-cert={tmp_path / 'ca.pem'}",
    )
    assert result.exit_code == 0, result.output
    (config,) = started
    assert (config.tls_cert_file, config.tls_key_file, config.tls_client_ca) == (
        tmp_path / "cert.pem",
        tmp_path / "key.pem",
        tmp_path / "ca.pem",
    )
    assert "HTTPS on the HTTP port too" in result.stderr


def test_the_docs_table_has_every_flag() -> None:
    table = (Path(__file__).parents[3] / "docs" / "triton.md").read_text()
    rows = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `--")}
    assert rows == {name for name, _ in tritonserver_flags()}

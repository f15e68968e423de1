"""White-box test: imports ketch implementation modules (private) directly.

``ketch run --otel-endpoint URL``: a bad URL and a missing exporter are usage errors
naming what is wrong; with the exporters set up, every agent the command builds is
instrumented."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ketch.cli import _otel
from ketch.cli._config import ConfigError
from ketch.cli._config import Settings
from ketch.cli._factory import build_agent
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _ketch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["hello"]))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "PYTHONPATH": SRC,
    }
    return subprocess.run(
        [sys.executable, "-m", "ketch", "run", "--model", f"scripted:{script}", *args, "hi"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_bad_endpoint_is_a_usage_error(tmp_path: Path) -> None:
    proc = _ketch(tmp_path, "--otel-endpoint", "localhost:4318")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        "ketch: --otel-endpoint 'localhost:4318': expected an http:// or https:// URL (e.g. http://localhost:4318)\n"
    )


def test_a_missing_exporter_package_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(ConfigError) as caught:
        _otel.configure("http://127.0.0.1:4318")
    assert str(caught.value) == (
        "--otel-endpoint needs the OTLP exporter: pip install opentelemetry-exporter-otlp-proto-http"
    )


async def test_agents_the_command_builds_are_instrumented(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    monkeypatch.setattr(_otel, "_providers", (tracer_provider, meter_provider))
    model = ScriptedModel([reply(tool_call("ls", {}, id="c1")), "done"], provider="openai", id="gpt-5-mini")
    built = build_agent(Settings(tools=["ls"]), tmp_path, approver=None, model=model, environ={})
    await built.agent.prompt("list")
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["chat gpt-5-mini", "chat gpt-5-mini", "execute_tool ls", "invoke_agent ketch"]
    _otel.shutdown()
    assert _otel._providers is None


async def test_without_the_flag_nothing_is_instrumented(tmp_path: Path) -> None:
    assert _otel._providers is None
    built = build_agent(Settings(), tmp_path, approver=None, model=ScriptedModel(["x"]), environ={})
    assert built.agent.config.middlewares == ()


def test_a_run_sends_its_spans_and_metrics_to_the_otlp_endpoint(tmp_path: Path) -> None:
    """A real OTLP/HTTP exchange with a collector on loopback: the command's spans and
    metrics arrive as protobuf at /v1/traces and /v1/metrics when the command ends."""
    import threading
    from http.server import BaseHTTPRequestHandler
    from http.server import ThreadingHTTPServer

    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received: list[tuple[str, str, bytes]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, self.headers["Content-Type"], body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        proc = _ketch(tmp_path, "--otel-endpoint", f"http://127.0.0.1:{server.server_address[1]}/")
    finally:
        server.shutdown()
        server.server_close()
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "hello\n", "")
    spans = []
    metrics = []
    for path, content_type, body in received:
        assert content_type == "application/x-protobuf"
        if path == "/v1/traces":
            request = ExportTraceServiceRequest.FromString(body)
            spans += [s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
        else:
            assert path == "/v1/metrics"
            request_m = ExportMetricsServiceRequest.FromString(body)
            metrics += [m.name for rm in request_m.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]
    assert sorted(spans) == ["chat scripted-model", "invoke_agent ketch"]
    assert sorted(metrics) == ["gen_ai.client.operation.duration", "gen_ai.client.token.usage"]

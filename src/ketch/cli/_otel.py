"""``--otel-endpoint URL``: the command's runs as OpenTelemetry traces and metrics, sent
over OTLP/HTTP (protobuf) to ``URL/v1/traces`` and ``URL/v1/metrics``.

Needs the ``otel`` extra, which brings the OTLP exporter package
(``opentelemetry-exporter-otlp-proto-http``); without it the flag is a usage error
naming what to install. Nothing OpenTelemetry is imported unless the flag is given.
"""

from __future__ import annotations

import importlib
from typing import Any
from urllib.parse import urlsplit

from ._config import ConfigError

EXPORTER_PACKAGE = "opentelemetry-exporter-otlp-proto-http"

_providers: tuple[Any, Any] | None = None


def check_endpoint(url: str) -> str:
    """``url`` without a trailing slash, or a ConfigError naming what is wrong with it."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--otel-endpoint {url!r}: expected an http:// or https:// URL (e.g. http://localhost:4318)")
    return url.rstrip("/")


def configure(url: str) -> None:
    """Export spans and metrics to the OTLP/HTTP collector at ``url``; every agent the
    command builds afterwards is instrumented (:func:`attach`)."""
    global _providers
    endpoint = check_endpoint(url)
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ConfigError("--otel-endpoint needs the otel extra: pip install 'ketch[otel]'") from None
    try:
        # By name: the exporter package is optional, even for the type checker.
        base = "opentelemetry.exporter.otlp.proto.http"
        OTLPSpanExporter = importlib.import_module(f"{base}.trace_exporter").OTLPSpanExporter
        OTLPMetricExporter = importlib.import_module(f"{base}.metric_exporter").OTLPMetricExporter
    except ImportError:
        raise ConfigError(f"--otel-endpoint needs the OTLP exporter: pip install {EXPORTER_PACKAGE}") from None
    resource = Resource.create({"service.name": "ketch"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics"))
    _providers = (tracer_provider, MeterProvider(resource=resource, metric_readers=[reader]))


def attach(agent: Any) -> None:
    """Instrument ``agent`` when ``--otel-endpoint`` was given (else nothing)."""
    if _providers is None:
        return
    from ..telemetry import instrument

    instrument(agent, tracer_provider=_providers[0], meter_provider=_providers[1], agent_name="ketch")


def tracer_provider() -> Any:
    """The tracer provider :func:`configure` set up, or None."""
    return _providers[0] if _providers is not None else None


def shutdown() -> None:
    """Send what is buffered and stop the exporters (at the end of the command)."""
    global _providers
    if _providers is None:
        return
    providers, _providers = _providers, None
    for provider in providers:
        try:
            provider.shutdown()
        except Exception:
            pass

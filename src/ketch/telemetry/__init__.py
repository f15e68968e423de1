"""OpenTelemetry for ketch (the ``otel`` extra): spans and metrics per the GenAI
semantic conventions.

::

    from ketch.telemetry import instrument

    instrument(agent, tracer_provider=provider)   # invoke_agent > chat / execute_tool spans

Importing this package imports no OpenTelemetry module; :func:`instrument` does.
"""

from ._instrument import Instrumentation
from ._instrument import TracedModel
from ._instrument import instrument
from ._instrument import provider_name

__all__ = ["Instrumentation", "TracedModel", "instrument", "provider_name"]

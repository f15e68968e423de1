"""``ketch worker``: a Temporal worker running durable agents (``ketch.temporal``).

::

    ketch worker --task-queue agents [--address 127.0.0.1:7233] [--namespace default]
                 [--app module:attr | -m provider:model]

``--app`` names a function (or a list) giving the agents: a list of
:class:`ketch.temporal.DurableAgent`, or a dict of :func:`ketch.temporal.build_worker`
keywords (``agents``, ``models``, ``store``, ``journal``, ...). Without it the worker runs
one agent, ``ketch``: ``DurableAgent(Agent(<--model>, tools=coding_tools(<cwd>)),
name="ketch")``. A worker whose agents have the ``write`` or ``edit`` tool warns when
their exactly-once journal is on this machine only (see
:func:`ketch.tools.journal_warning`).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from ._args import OneLineParser
from ._wire import EXIT_USAGE


def _parser() -> OneLineParser:
    p = OneLineParser(prog="ketch worker", description="Run durable agents on a Temporal task queue.")
    p.add_argument("--task-queue", required=True, help="the Temporal task queue to poll")
    p.add_argument(
        "--address", default=os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233"),
        help="Temporal frontend host:port (default $TEMPORAL_ADDRESS or 127.0.0.1:7233)",
    )
    p.add_argument("--namespace", default=os.environ.get("TEMPORAL_NAMESPACE", "default"), help="Temporal namespace")
    p.add_argument("--app", help="module:attr giving the agents (a list, or build_worker keywords as a dict)")
    p.add_argument("-m", "--model", help="provider:model of the default agent (without --app)")
    return p


def _load_app(spec: str) -> dict[str, Any]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--app must be module:attr, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--app {spec!r}: cannot import {module_name!r} ({exc})") from None
    try:
        value = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"--app {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    if callable(value):
        value = value()
    if isinstance(value, dict):
        return value
    return {"agents": list(value)}


def _default_app(model: str | None) -> dict[str, Any]:
    from .. import Agent
    from ..temporal import DurableAgent
    from ..tools import coding_tools

    if not model:
        raise ValueError("--model is required without --app (e.g. -m anthropic:claude-sonnet-4-5)")
    if model.startswith("scripted:"):  # for tests, as `ketch run --model scripted:<path>`
        from ._scripted import load_scripted_model

        resolved: Any = load_scripted_model(model.removeprefix("scripted:"))
    else:
        resolved = model
    try:
        agent: Agent[Any] = Agent(resolved, tools=coding_tools(os.getcwd()))
    except (KeyError, LookupError, ImportError, TypeError) as exc:
        raise ValueError(f"cannot use model {model!r}: {exc.args[0] if exc.args else exc}") from None
    return {"agents": [DurableAgent(agent, name="ketch")]}


async def _serve(args: Any, app: dict[str, Any]) -> None:
    from temporalio.client import Client

    from ..temporal import build_worker

    client = await Client.connect(args.address, namespace=args.namespace)
    worker = build_worker(client, task_queue=args.task_queue, **app)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        names = ", ".join(a.name for a in app["agents"])
        print(f"ketch worker: {names} on task queue {args.task_queue!r} at {args.address}", flush=True)
        await stop.wait()


def worker_command(argv: Sequence[str]) -> int:
    """``ketch worker``: exit code 0 on SIGINT/SIGTERM, 2 on bad arguments."""
    args = _parser().parse_args(list(argv))
    try:
        import temporalio  # noqa: F401
    except ImportError:
        print("ketch worker: needs the 'temporal' extra (pip install 'ketch[temporal]')", file=sys.stderr)
        return EXIT_USAGE
    try:
        app = _load_app(args.app) if args.app else _default_app(args.model)
    except ValueError as exc:
        print(f"ketch worker: {exc}", file=sys.stderr)
        return EXIT_USAGE
    asyncio.run(_serve(args, app))
    # The worker stopped cleanly. temporalio's Rust bridge threads can outlive the event
    # loop and abort CPython's finalization ("Fatal Python error: PyGILState_Release ...
    # finalizing", temporalio/sdk-python#300), turning exit code 0 into SIGABRT: flush
    # and leave without finalizing.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

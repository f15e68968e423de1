"""The ``@tool`` decorator: a :class:`~ketch.loop.Tool` from a plain Python function.

::

    @tool
    def weather(city: str, days: int = 1) -> str:
        '''Forecast for a city.

        Args:
            city: City name.
            days: Days ahead.
        '''

    @tool(name="fetch", timeout=30, sequential=True)
    async def fetch_url(url: str, ctx: ToolContext) -> str: ...

The name defaults to the function name and the description to the docstring's first
paragraph; the parameter schema comes from the type hints (built by ``ketch._schema``).
A parameter annotated :class:`~ketch.loop.ToolContext` receives the call's context
and is not shown to the model. Sync functions run in a worker thread so they never
block the event loop; a sync function that is still running when its call is cancelled
finishes in its thread, its result discarded.

The result is a :class:`FunctionTool`. It stays callable as the original function
(``weather("Oslo")``), and the function is also available as ``.fn`` / ``__wrapped__``.
Used on a method (first parameter an unannotated ``self``), accessing it on an
instance gives a tool bound to that instance.
"""

from __future__ import annotations

import asyncio
import inspect
import types
from collections.abc import Callable
from typing import Any
from typing import Literal
from typing import TypedDict
from typing import Unpack
from typing import overload

import msgspec

from .._schema import FunctionSchema
from .._schema import function_schema
from ..loop import Tool
from ..loop import ToolContext
from ..loop import ToolResult
from ..loop import to_tool_result


class ToolOptions(TypedDict, total=False):
    """The optional declarations of a :class:`~ketch.loop.Tool`, as keywords of
    :func:`tool` and :class:`FunctionTool` (defaults and meaning: ``Tool``)."""

    label: str | None
    sequential: bool | Callable[[dict[str, Any]], bool]
    read_only: bool | Callable[[dict[str, Any]], bool]
    requires_approval: bool | Callable[[dict[str, Any]], bool]
    deferred: bool | None
    interrupt: Literal["block", "cancel"]
    timeout: float | None
    prepare_arguments: Callable[[dict[str, Any]], dict[str, Any]] | None
    strict: bool
    validate: Callable[[dict[str, Any], ToolContext[Any]], Any] | None
    preview: Callable[[dict[str, Any], ToolContext[Any]], Any] | None


def _is_async_callable(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


class FunctionTool(Tool):
    """A tool that calls a Python function. Build it with :func:`tool`.

    ``execute`` converts the (already validated) JSON arguments to the annotated
    Python types, calls the function, and normalises the return value with
    :func:`~ketch.loop._tool.to_tool_result`. Calling the tool object calls the function.
    """

    __slots__ = ("__wrapped__", "_is_async", "fn", "signature")

    fn: Callable[..., Any]
    signature: FunctionSchema

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        **options: Unpack[ToolOptions],
    ) -> None:
        if not callable(fn):
            raise TypeError(f"@tool needs a function, got {fn!r}")
        signature = function_schema(fn, description=description, context_type=ToolContext)
        super().__init__(
            name or signature.name,
            signature.description,
            signature.parameters,
            reports_progress=signature.context_param is not None,
            **options,
        )
        self.fn = fn
        self.__wrapped__ = fn
        self.signature = signature
        self._is_async = _is_async_callable(fn)

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        """Convert ``args``, call the function (sync ones in a thread), return its result."""
        positional, keywords = self.signature.bind(args, ctx)
        if self._is_async:
            result = await self.fn(*positional, **keywords)
        else:
            result = await asyncio.to_thread(self.fn, *positional, **keywords)
            if inspect.isawaitable(result):
                result = await result
        return to_tool_result(result)

    async def invoke(self, args: dict[str, Any], ctx: ToolContext[Any]) -> Any:
        """Convert ``args`` and call the function on this thread (a sync one too, which
        blocks the event loop while it runs); return what it returned, awaited.

        For callers that may not start threads, such as a Temporal workflow running a
        pure tool; :meth:`execute` is the right call everywhere else.
        """
        positional, keywords = self.signature.bind(args, ctx)
        result = self.fn(*positional, **keywords)
        if inspect.isawaitable(result):
            result = await result
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the original function directly."""
        return self.fn(*args, **kwargs)

    def __get__(self, instance: Any, owner: type | None = None) -> FunctionTool:
        if instance is None or not self.signature.is_method:
            return self
        bound: FunctionTool = object.__new__(FunctionTool)
        for slot in (*Tool.__slots__, *FunctionTool.__slots__):
            object.__setattr__(bound, slot, getattr(self, slot))
        bound.fn = types.MethodType(self.fn, instance)
        bound.__wrapped__ = bound.fn
        bound.signature = msgspec.structs.replace(self.signature, is_method=False)
        return bound

    def __repr__(self) -> str:
        return f"FunctionTool(name={self.name!r}, fn={getattr(self.fn, '__qualname__', self.fn)!r})"


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Unpack[ToolOptions],
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Unpack[ToolOptions],
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a :class:`FunctionTool` from a function; use bare (``@tool``) or with options.

    Options are those of :class:`~ketch.loop.Tool`; ``name`` defaults to the
    function's name and ``description`` to its docstring's first paragraph.
    """

    def wrap(func: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            func,
            name=name,
            description=description,
            **options,
        )

    if fn is not None:
        return wrap(fn)
    return wrap

"""Tools from plain functions: typed arguments, your own dependencies, progress, errors.

    python examples/tools/custom_tools.py

A tool is a function with type hints and a docstring; ``@tool`` turns the hints into
the JSON schema the model sees and the docstring into its description. A parameter
annotated ``ToolContext`` is not shown to the model: it carries the call's context, such
as ``deps`` (your own object, given once to the Agent) and ``progress()``.
"""

import asyncio
import os
from dataclasses import dataclass
from dataclasses import field
from typing import Literal

from ketch import Agent
from ketch import ToolContext
from ketch import ToolResult
from ketch import tool
from ketch.loop import ToolExecutionUpdate
from ketch.loop import ToolProgress
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


@dataclass
class Shop:
    """The application's own state, handed to every tool as ``ctx.deps``."""

    stock: dict[str, int] = field(default_factory=lambda: {"apple": 3, "pear": 0})
    orders: list[str] = field(default_factory=list)


@tool(read_only=True)
def check_stock(item: str, ctx: ToolContext[Shop]) -> int:
    """How many of an item are in stock.

    Args:
        item: The item's name, e.g. "apple".
    """
    return ctx.deps.stock.get(item, 0)


@tool
async def order(item: str, quantity: int, speed: Literal["standard", "express"], ctx: ToolContext[Shop]) -> ToolResult:
    """Order an item.

    Args:
        item: The item's name.
        quantity: How many to order (at least 1).
        speed: The delivery speed.
    """
    if quantity < 1:
        return ToolResult.error(f"quantity must be at least 1, got {quantity}")  # the model reads this
    await ctx.progress("placing the order", progress=1, total=2)
    ctx.deps.orders.append(f"{quantity} x {item} ({speed})")
    await ctx.progress("confirmed", progress=2, total=2)
    # content goes to the model; details stay with your program (UI, logs)
    return ToolResult(content=f"ordered {quantity} {item}(s), {speed}", details={"order_id": len(ctx.deps.orders)})


async def main() -> None:
    model = os.environ.get("KETCH_EXAMPLE_MODEL") or ScriptedModel([
        reply(tool_call("check_stock", {"item": "pear"})),
        reply(tool_call("order", {"item": "pear", "quantity": 2, "speed": "express"})),
        "Pears were out of stock, so I ordered 2 by express delivery.",
    ])
    shop = Shop()
    agent = Agent(model, tools=[check_stock, order], deps=shop,
                  system_prompt="You run a shop. Check the stock before ordering.")

    def show_progress(event: object) -> None:
        if isinstance(event, ToolExecutionUpdate) and isinstance(event.partial, ToolProgress):
            print(f"  [{event.tool_name}] {event.partial.message}")

    agent.subscribe(show_progress)
    result = await agent.prompt("We need two pears, fast.")
    print(result.text)
    print("orders:", shop.orders)
    print("the schema the model saw for order():", order.parameters["properties"]["speed"])


if __name__ == "__main__":
    asyncio.run(main())

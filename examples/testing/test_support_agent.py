"""Testing an agent of your own with pytest, offline and exactly.

    python -m pytest examples/testing/test_support_agent.py

``ScriptedModel`` plays the model's side from a script and records every request it
got; ``FunctionModel`` computes each reply from the request. Both stream through the
same protocol as a real provider, so the agent, its tools and its events run exactly
as in production. Assert on behaviour: the tools called with which arguments, the
final text, what the model was sent.
"""

from ketch import Agent
from ketch import tool
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import ToolResultMessage
from ketch.testing import FunctionModel
from ketch.testing import Reply
from ketch.testing import ScriptedModel
from ketch.testing import error_reply
from ketch.testing import reply
from ketch.testing import tool_call

ORDERS = {"A-1": "shipped", "B-2": "processing"}


@tool(read_only=True)
def order_status(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: The order number, e.g. "A-1".
    """
    return ORDERS.get(order_id, "unknown order")


def support_agent(model: ScriptedModel | FunctionModel) -> Agent[None]:
    """The agent under test: in production ``model`` is a "provider:model" string."""
    return Agent(model, system_prompt="You answer order questions.", tools=[order_status])


async def test_looks_up_the_order_and_answers() -> None:
    model = ScriptedModel([reply(tool_call("order_status", {"order_id": "A-1"})), "Order A-1 has shipped."])
    result = await support_agent(model).prompt("Where is my order A-1?")

    assert result.text == "Order A-1 has shipped."
    assert result.end_reason == "stop"
    tool_results = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_name, m.text) for m in tool_results] == [("order_status", "shipped")]
    # what the model was sent: the tool's definition, then the tool's result
    assert model.requests[0].tool_names == ["order_status"]
    assert model.requests[1].messages[-1] == tool_results[0]
    model.assert_complete()  # every scripted reply was used


async def test_a_provider_error_ends_the_run_without_raising() -> None:
    model = ScriptedModel([error_reply("upstream is down", kind="overloaded")])
    result = await support_agent(model).prompt("Where is my order?")

    assert result.end_reason == "error"
    assert "upstream is down" in (result.summary.error or "")


async def test_replies_computed_from_the_request() -> None:
    def respond(request: Request, options: StreamOptions) -> Reply | str:
        results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        if not results:
            return reply(tool_call("order_status", {"order_id": "B-2"}))
        return f"Your order is {results[-1].text}."

    result = await support_agent(FunctionModel(respond)).prompt("And B-2?")
    assert result.text == "Your order is processing."

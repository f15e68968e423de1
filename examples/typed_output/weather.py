"""Typed output: a run that ends with a validated Python value instead of free text.

    python examples/typed_output/weather.py

``output_type`` may be a dataclass, TypedDict, msgspec Struct, pydantic model, a
primitive or a union. The answer is validated; an answer that does not fit, or that an
output validator rejects, goes back to the model with what was wrong. Offline, the
scripted model answers through the output tool (``final_result``), which is how ketch
asks a model without native structured output.
"""

import asyncio
import os
from dataclasses import dataclass

from ketch import Agent
from ketch import RejectOutput
from ketch.loop import OUTPUT_TOOL_NAME
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


@dataclass
class Weather:
    city: str
    temperature_c: int
    summary: str


async def main() -> None:
    model = os.environ.get("KETCH_EXAMPLE_MODEL") or ScriptedModel([
        # the first answer is implausible: the validator below sends it back
        reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Paris", "temperature_c": 75, "summary": "hot"})),
        reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Paris", "temperature_c": 18, "summary": "light rain"})),
        reply(tool_call(OUTPUT_TOOL_NAME, {"city": "Oslo", "temperature_c": 4, "summary": "clear and cold"})),
    ])
    agent = Agent(model, output_type=Weather, output_retries=2,
                  system_prompt="Answer with a plausible weather report.")

    @agent.output_validator
    def plausible(weather: Weather) -> None:
        if not -60 <= weather.temperature_c <= 60:
            raise RejectOutput(f"{weather.temperature_c} °C is not a plausible temperature; answer in Celsius.")

    result = await agent.prompt("What's the weather in Paris?")
    print(result.end_reason, result.output)

    # Stream the value while the answer is written: each partial validates so far.
    async with agent.stream_output("And in Oslo?") as stream:
        async for partial in stream:
            print("partial:", partial)
    result = await stream.result()
    print("final:", result.output)


if __name__ == "__main__":
    asyncio.run(main())

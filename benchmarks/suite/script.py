"""The deterministic conversation the scripted server plays and the clients check.

A run is ``rounds`` model turns that each call ``add(a, b)`` once, then a final text of
``chunks`` streamed pieces. Round ``k`` asks for ``add(2k+1, 2k+2)``; the final text
starts with the tool results the server found in the request, so a client that did not
run the tool (or sent the wrong result back) gets a different text and fails its check.
"""

from __future__ import annotations

PROMPT = "Add the numbers the tool asks for, three times, then write the report."
TOOL_NAME = "add"
TOOL_DESCRIPTION = "Add two integers."
TOOL_PARAMETERS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}
ROUNDS = 3
CHUNKS = 300
MODEL = "gpt-4o-mini"


def tool_args(k: int) -> tuple[int, int]:
    """The arguments of round ``k`` (0-based)."""
    return 2 * k + 1, 2 * k + 2


def args_pieces(k: int) -> list[str]:
    """The JSON arguments of round ``k`` cut into the pieces the server streams."""
    a, b = tool_args(k)
    text = f'{{"a": {a}, "b": {b}}}'
    return [text[i : i + 4] for i in range(0, len(text), 4)]


def expected_results(rounds: int) -> list[str]:
    """The tool results a correct client sends back, in order."""
    return [str(sum(tool_args(k))) for k in range(rounds)]


def text_chunks(results: list[str], chunks: int) -> list[str]:
    """The final answer's streamed pieces; the first one names the tool results seen."""
    head = "Sums: " + ", ".join(results) + "." if results else "Done."
    return [head] + [f" w{i}" for i in range(1, chunks)]


def expected_text(rounds: int = ROUNDS, chunks: int = CHUNKS) -> str:
    """The final text of a correct run."""
    return "".join(text_chunks(expected_results(rounds), chunks))


def base_path(rounds: int = ROUNDS, chunks: int = CHUNKS) -> str:
    """The URL path prefix that selects a script on the server (``/r3/c300``)."""
    return f"/r{rounds}/c{chunks}"


CALLS = {"add": 0}
"""How many times :func:`add_numbers` ran (the client checks it)."""


async def add_numbers(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    CALLS["add"] += 1
    return a + b

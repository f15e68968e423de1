"""The context cost of installed Agent Skills before any is used, and their discovery time.

For N installed skills (descriptions of realistic length, ~200 characters, like the ones
the public skill collections ship), the first request of a run carries one line per skill
in the system prompt and the ``skill`` tool's definition. This measures that request's
size against the same agent without skills: characters and estimated tokens
(the context estimate, ``ketch.llm._tokens.estimate_text_tokens``, ~4 characters a token), and the median time
:func:`ketch.skills.find_skills` takes to read N ``SKILL.md`` folders.

Run: ``python benchmarks/bench_skills.py`` (prints a Markdown table). Nothing here is a test.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from ketch import Agent
from ketch.llm._tokens import estimate_text_tokens
from ketch.skills import Skills
from ketch.skills import find_skills
from ketch.testing import ScriptedModel

DESCRIPTION = (
    "Create, edit and analyse {topic} files: read their structure, change them while keeping "
    "their formatting, and check the result. Use when the user works with {topic} documents "
    "or asks to convert them."
)
BODY = "# Instructions\n\n" + "Follow these steps carefully. " * 200


def _install(root: Path, n: int) -> None:
    for i in range(n):
        folder = root / f"skill-{i:03d}"
        folder.mkdir(parents=True)
        text = f"---\nname: skill-{i:03d}\ndescription: {DESCRIPTION.format(topic=f'format-{i:03d}')}\n---\n{BODY}\n"
        (folder / "SKILL.md").write_text(text, encoding="utf-8")


async def _first_request_size(skills: Skills | None) -> tuple[int, int]:
    model = ScriptedModel(["ok"])
    agent = Agent(model, system_prompt="You are a helpful agent.", capabilities=[skills] if skills else [])
    await agent.prompt("hello")
    request = model.requests[0]
    text = request.system_prompt + json.dumps(
        [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in request.tools]
    )
    return len(text), estimate_text_tokens(text)


async def main() -> None:
    print("| skills | first request chars (added) | est. tokens (added) | tokens per skill | find_skills median |")
    print("|---:|---:|---:|---:|---:|")
    base_chars, base_tokens = await _first_request_size(None)
    for n in (1, 10, 100):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            _install(root, n)
            times = []
            for _ in range(20):
                start = time.perf_counter()
                skills, errors = find_skills([(root, "user")])
                times.append(time.perf_counter() - start)
            assert not errors and len(skills) == n
            chars, tokens = await _first_request_size(Skills(skills))
        added = tokens - base_tokens
        print(
            f"| {n} | {chars} (+{chars - base_chars}) | {tokens} (+{added}) | {added / n:.1f} "
            f"| {statistics.median(times) * 1e3:.1f} ms |"
        )


if __name__ == "__main__":
    asyncio.run(main())

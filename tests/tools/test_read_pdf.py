"""The read tool returns a PDF as a document block to a model that takes documents, and
an error saying so (and what to use instead) to any other, or over its size limit."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import DocumentContent
from ketch.llm import TextContent
from ketch.llm import takes_documents
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.tools import Workspace
from ketch.tools._read import ReadTool

PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def asked_by(provider: str, api: str, model: str = "m") -> ToolContext[None]:
    message = AssistantMessage(content=[], provider=provider, api=api, model=model)
    return ToolContext(call_id="c1", tool_name="read", signal=AbortSignal(), assistant_message=message)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "report.pdf").write_bytes(PDF)
    return tmp_path.resolve()


async def read(root: Path, ctx: ToolContext[None], **options: int) -> ToolResult:
    return await ReadTool(Workspace(root), **options).execute({"path": "docs/report.pdf"}, ctx)


@pytest.mark.parametrize(("provider", "api"), [
    ("anthropic", "anthropic-messages"), ("google", "gemini"), ("openai", "openai-responses"), ("openai", "openai-chat"),
])
async def test_a_pdf_comes_back_as_a_document_to_a_model_that_takes_them(root: Path, provider: str, api: str) -> None:
    result = await read(root, asked_by(provider, api))
    assert not result.is_error
    assert result.blocks == [
        TextContent(text="Read document docs/report.pdf [application/pdf, 51 bytes]"),
        DocumentContent(data=base64.b64encode(PDF).decode(), name="report.pdf"),
    ]
    assert result.details == {"path": str(root / "docs" / "report.pdf"), "mime_type": "application/pdf", "bytes": 51}


async def test_a_model_without_documents_gets_an_error_naming_it(root: Path) -> None:
    result = await read(root, asked_by("groq", "openai-chat", "llama-3.3"))
    assert result.is_error
    assert result.text == (
        "docs/report.pdf is a PDF and this model (groq/llama-3.3) does not take documents. "
        "Use bash (pdftotext docs/report.pdf -) for its text."
    )


async def test_a_caller_that_is_no_model_gets_the_error(root: Path) -> None:
    ctx: ToolContext[None] = ToolContext(call_id="c1", tool_name="read", signal=AbortSignal())
    result = await read(root, ctx)
    assert result.text.startswith("docs/report.pdf is a PDF and this caller does not take documents.")


async def test_a_pdf_over_the_document_limit_is_an_error(root: Path) -> None:
    result = await read(root, asked_by("anthropic", "anthropic-messages"), max_document_bytes=50)
    assert result.is_error
    assert result.text == (
        "docs/report.pdf is a PDF of 51 bytes, more than the 50 bytes limit for documents. Use bash (pdftotext) for its text."
    )


def test_which_apis_take_documents() -> None:
    assert [takes_documents(p, a) for p, a in [
        ("anthropic", "anthropic-messages"), ("google", "gemini"), ("openai", "openai-responses"),
        ("openai", "openai-chat"), ("groq", "openai-chat"), ("local", "local"),
    ]] == [True, True, True, True, False, False]

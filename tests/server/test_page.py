"""The web page in Debian's Chromium, driven by Playwright (headless; never `playwright install`).

The approval, steering and abort flows run on a scripted model (deterministic); one test
runs the embedded SmolLM2 model, constrained so that what is asserted is guaranteed: its
first call is a grammar-forced ``ls`` whose result is exact."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serverhelp import TOKEN
from serverhelp import ServeProcess
from serverhelp import start_serve

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS = Path(__file__).resolve().parents[2] / "docs"
TIMEOUT = 60_000  # ms: generous for a shared 2-core machine; never a timing assertion


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS, viewport={"width": 1200, "height": 800}
        )
        context.set_default_timeout(TIMEOUT)
        try:
            yield context
        finally:
            context.close()


def _open(browser: Any, served: ServeProcess) -> Any:
    page = browser.new_page()
    page.goto(f"{served.url}/?token={TOKEN}")  # the printed URL: sets the cookie, redirects to /
    assert page.url == f"{served.url}/"
    page.wait_for_selector("body[data-ready]", state="attached")
    return page


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            [
                {
                    "blocks": [
                        {"type": "thinking", "thinking": "The user wants a note; writing needs approval."},
                        {"type": "text", "text": "I will write the note."},
                        {"type": "tool_call", "id": "w1", "name": "write", "args": {"path": "note.txt", "content": "hello\n"}},
                    ]
                },
                "Wrote note.txt.",
                {"blocks": [{"type": "tool_call", "id": "b1", "name": "bash", "args": {"command": "cat pipe"}}]},
                "Steered and done.",
                {"blocks": [{"type": "text", "text": "Streaming this answer slowly"}], "hang": True},
            ]
        )
    )
    return path


def test_approve_steer_abort_and_reload_in_the_browser(tmp_path: Path, browser: Any) -> None:
    script = _script(tmp_path)
    served = start_serve(tmp_path, "--allow", "Bash(cat pipe)", env_extra={"KETCH_TEST_SCRIPT": str(script)})
    work = tmp_path / "work"
    os.mkfifo(work / "pipe")
    try:
        page = _open(browser, served)
        page.click("[data-testid=new-session]")
        page.wait_for_selector("body[data-session]", state="attached")

        # a prompt; the write call needs approval: the run pauses and the page asks
        page.fill("[data-testid=input]", "Write hello to note.txt")
        page.click("[data-testid=send]")
        approval = page.wait_for_selector("[data-testid=approval][data-call-id=w1]")
        assert "write" in approval.inner_text() and "note.txt" in approval.inner_text()
        assert page.inner_text("[data-testid=status]") == "waiting for approval"
        assert page.locator("[data-testid=thinking]").count() == 1
        assert page.locator("details[data-testid=thinking]").get_attribute("open") is None  # collapsed
        page.click("[data-testid=approval][data-call-id=w1] [data-testid=approve]")
        page.wait_for_selector("[data-testid=assistant-text]:text('Wrote note.txt.')")
        page.wait_for_selector("[data-testid=status]:text('idle')")
        assert (work / "note.txt").read_text() == "hello\n"
        assert page.locator("[data-testid=approvals]").is_hidden()
        write = page.locator("[data-testid=tool-call][data-call-id=w1]")
        assert '"path": "note.txt"' in write.locator("[data-testid=tool-args]").inner_text()
        assert write.locator("[data-testid=tool-result]").count() == 1

        # steer a running agent: the bash call blocks on a pipe until the test writes it
        page.fill("[data-testid=input]", "Run cat on the pipe")
        page.click("[data-testid=send]")
        page.wait_for_selector("[data-testid=tool-call][data-call-id=b1].running")
        assert page.inner_text("[data-testid=send]") == "Steer"
        page.fill("[data-testid=input]", "Also say you were steered")
        page.click("[data-testid=send]")
        page.wait_for_selector(".note:text('(steering: Also say you were steered)')")
        writer = threading.Thread(target=lambda: (work / "pipe").write_text("piped\n"), daemon=True)
        writer.start()
        page.wait_for_selector("[data-testid=assistant-text]:text('Steered and done.')")
        writer.join(60)
        assert page.locator("[data-testid=tool-call][data-call-id=b1] [data-testid=tool-result]").inner_text() == "piped"
        users = page.locator("#transcript > [data-testid=user-message] .text").all_inner_texts()
        assert users == ["Write hello to note.txt", "Run cat on the pipe", "Also say you were steered"]

        # streamed text shows before the message ends; abort ends the run
        page.wait_for_selector("[data-testid=status]:text('idle')")
        page.fill("[data-testid=input]", "Say something long")
        page.click("[data-testid=send]")
        page.wait_for_selector("[data-testid=assistant-text]:text('Streaming this answer slowly')")
        assert page.inner_text("[data-testid=status]") == "running"
        page.click("[data-testid=abort]")
        page.wait_for_selector(".note:text('run ended: aborted')")
        page.wait_for_selector("[data-testid=status]:text('idle')")
        assert float(page.inner_text("[data-testid=cost]").lstrip("$")) >= 0
        assert page.inner_text("[data-testid=context]").split(" / ")[1] != "0"

        # reload: the transcript comes back from the session
        page.reload()
        page.wait_for_selector("[data-testid=assistant-text]:text('Steered and done.')")
        users = page.locator("#transcript > [data-testid=user-message] .text").all_inner_texts()
        assert users == ["Write hello to note.txt", "Run cat on the pipe", "Also say you were steered", "Say something long"]
        assert page.locator("[data-testid=tool-call]").count() == 2
        assert page.locator("[data-testid=session-item]").count() == 1
        # KETCH_UPDATE_SCREENSHOT=1 refreshes the README's picture (docs/server.png)
        shot = DOCS / "server.png" if os.environ.get("KETCH_UPDATE_SCREENSHOT") else tmp_path / "server.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 0
    finally:
        served.stop()


def test_subagent_events_render_nested_under_their_tool_call(tmp_path: Path, browser: Any) -> None:
    served = start_serve(tmp_path)
    try:
        page = _open(browser, served)
        nested = page.evaluate(
            """() => {
              const root = document.createElement("div");
              const view = new View(root);
              view.assistantMessage({role: "assistant", content: [{type: "tool_call", id: "s1", name: "subagent", args: {task: "look"}}]});
              const sub = (event) => view.handle({type: "tool_execution_update", tool_call_id: "s1",
                  partial: {type: "subagent_event", path: "main/researcher#1", event}});
              sub({type: "message_start", message: {role: "assistant", content: []}});
              sub({type: "message_update", event: {type: "text_delta", index: 0, delta: "Found "}});
              sub({type: "message_update", event: {type: "text_delta", index: 0, delta: "it."}});
              const streaming = root.querySelector("[data-testid=subagent] [data-testid=assistant-text]").textContent;
              sub({type: "message_end", message: {role: "assistant", content: [{type: "text", text: "Found it."},
                  {type: "tool_call", id: "r1", name: "read", args: {path: "a.py"}}]}});
              sub({type: "tool_execution_end", tool_call_id: "r1", tool_name: "read", is_error: false,
                  result: {content: [{type: "text", text: "print(1)"}]}});
              const box = root.querySelector("[data-testid=tool-call][data-call-id=s1] [data-testid=subagent]");
              return {path: box.dataset.path, streaming, text: box.querySelector("[data-testid=assistant-text]").textContent,
                      inner: box.querySelector("[data-testid=tool-call]").dataset.tool,
                      result: box.querySelector("[data-testid=tool-result]").textContent};
            }"""
        )
        assert nested == {"path": "main/researcher#1", "streaming": "Found it.", "text": "Found it.", "inner": "read", "result": "print(1)"}
    finally:
        served.stop()


def test_the_embedded_model_in_the_browser(tmp_path: Path, browser: Any) -> None:
    # What the constraint guarantees: the first call is a grammar-forced `ls` whose
    # result is exact; with --max-turns 1 the run ends there.
    served = start_serve(tmp_path, "--model", "local", "--tool-choice", "ls", "--max-turns", "1", "--max-tokens", "200")
    (tmp_path / "work" / "notes.txt").write_text("hello\n")
    try:
        page = _open(browser, served)
        page.click("[data-testid=new-session]")
        page.wait_for_selector("body[data-session]", state="attached")
        page.fill("[data-testid=input]", 'List the files in "." with ls.')
        page.click("[data-testid=send]")
        page.wait_for_selector(".note:text('run ended: max_turns')", timeout=600_000)
        call = page.locator("[data-testid=tool-call][data-tool=ls]")
        assert call.count() == 1
        assert "notes.txt" in call.locator("[data-testid=tool-result]").inner_text()
        assert page.inner_text("[data-testid=model]") == "" and page.input_value("[data-testid=model]").startswith("local:")
    finally:
        served.stop()

"""``@path`` mentions in ``ketch run`` prompts: a PDF goes as a document part, a recording
as an audio part, a text file as text, to a model that takes them (the request body the
provider got is checked); a model that takes none, a link out of the workspace, a file
over the limit and a denied file get one line each on stderr and are not sent."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from clihelp import Env
from clihelp import FakeServer
from clihelp import text_reply

PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00"


def openai_on(env: Env, server: FakeServer) -> None:
    env.user_config(
        f'[providers.openai]\nbase_url = "{server.base_url}"\napi = "openai-chat"\napi_key = "{server.good_key}"\n'
    )


def sent_content(server: FakeServer) -> Any:
    (post,) = [r for r in server.requests if r[0] == "POST"]
    return json.loads(post[3])["messages"][-1]["content"]


def test_a_pdf_a_recording_and_a_text_file_are_attached_by_type(env: Env, fake_server: FakeServer) -> None:
    openai_on(env, fake_server)
    (env.work / "docs").mkdir()
    (env.work / "docs" / "report.pdf").write_bytes(PDF)
    (env.work / "memo.wav").write_bytes(WAV)
    (env.work / "notes.txt").write_text("ship it\n")
    proc = env.run("run", "--model", "openai:gpt-4.1", "compare @docs/report.pdf, @memo.wav and @notes.txt")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "ketch: ↳ attached @docs/report.pdf (PDF document, 45 bytes)",
        "ketch: ↳ attached @memo.wav (audio/wav, 24 bytes)",
        "ketch: ↳ attached @notes.txt (1 line)",
    ]
    assert sent_content(fake_server) == [
        {"type": "text", "text": "compare @docs/report.pdf, @memo.wav and @notes.txt\n\n"
                                 "Files the user attached (as the read tool shows them):\n"
                                 '<file path="notes.txt">\n     1\tship it\n</file>'},
        {"type": "file", "file": {"filename": "report.pdf",
                                  "file_data": "data:application/pdf;base64," + base64.b64encode(PDF).decode()}},
        {"type": "input_audio", "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "wav"}},
    ]


def test_a_model_without_documents_or_audio_gets_neither(env: Env) -> None:
    (env.work / "report.pdf").write_bytes(PDF)
    (env.work / "memo.wav").write_bytes(WAV)
    script = env.script([text_reply("ok")])
    proc = env.run("run", "--model", f"scripted:{script}", "-o", "json", "read @report.pdf and @memo.wav")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "ketch: @report.pdf: not attached: the model scripted/scripted-model does not take documents",
        "ketch: @memo.wav: not attached: the model scripted/scripted-model does not take audio",
    ]


def test_a_link_out_a_file_over_the_limit_and_a_denied_file_are_not_sent(
    env: Env, fake_server: FakeServer, tmp_path: Path
) -> None:
    openai_on(env, fake_server)
    outside = tmp_path / "outside.pdf"
    outside.write_bytes(PDF + b"SECRET-OUTSIDE")
    os.symlink(outside, env.work / "link.pdf")
    with open(env.work / "big.pdf", "wb") as f:
        f.write(PDF)
        f.truncate(11 * 1024 * 1024)  # sparse, over the 10 MB limit
    (env.work / "private.pdf").write_bytes(PDF + b"SECRET-DENIED")
    proc = env.run("run", "--model", "openai:gpt-4.1", "--deny", "Read(./private.pdf)",
                   "read @link.pdf @big.pdf @private.pdf")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == (
        f"ketch: @link.pdf: not attached: Path 'link.pdf' is outside the workspace: it leads through a symlink "
        f"to {outside}. Access is limited to the workspace root {env.work}."
    )
    assert lines[1:] == [
        "ketch: @big.pdf: not attached: it is 11.0 MB, more than the 10.0 MB limit for attachments",
        "ketch: @private.pdf: not attached: Permission denied: the call matches the deny rule Read(./private.pdf).",
    ]
    assert sent_content(fake_server) == "read @link.pdf @big.pdf @private.pdf"
    assert "SECRET" not in fake_server.received()


def test_an_image_mention_is_attached_as_an_image_in_the_interactive_prompt(env: Env, terminals: list[Any]) -> None:
    from clihelp import Terminal

    env.vars["KETCH_HOME"] = str(env.home / "ketch-home")
    (env.work / "pic.png").write_bytes(PNG)
    script = env.script([text_reply("a pixel")], name="interactive.json")
    term = Terminal(env, "--model", f"scripted:{script}")
    terminals.append(term)
    term.expect("›")
    term.sendline("what is in @pic.png?")
    term.expect(r"↳ attached @pic\.png \(image, image/png\)")
    term.expect("a pixel")
    term.sendline("/exit")
    term.expect(r"Resume this session with: ketch --resume ([0-9a-f]{32})")
    match = term.child.match
    assert match is not None and term.wait_exit() == 0
    proc = env.run("sessions", "show", str(match.group(1)), "-o", "json")
    (user,) = [m for m in json.loads(proc.stdout)["messages"] if m["role"] == "user"]
    assert user["content"] == [
        {"type": "text", "text": "what is in @pic.png?"},
        {"type": "image", "mime_type": "image/png", "data": base64.b64encode(PNG).decode()},
    ]

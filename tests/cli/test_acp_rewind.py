"""``/rewind [N]`` over ACP: the prompts listed, a prompt undone with its edits and what
its bash commands did, byte for byte (scripted model)."""

from __future__ import annotations

import acp
from clihelp import Env
from clihelp import call_reply
from clihelp import text_reply
from test_acp import Editor
from test_acp import _script
from test_acp import ketch_acp


async def test_rewind_undoes_a_prompt_its_edits_and_what_bash_did(env: Env) -> None:
    original = {"a.txt": b"hello world\n", "b.bin": bytes(range(256)), "c.txt": b"moved\r\n"}
    for name, data in original.items():
        (env.work / name).write_bytes(data)
    _script(
        env,
        [
            call_reply(("c1", "read", {"path": "a.txt"})),
            call_reply(("c2", "edit", {"path": "a.txt", "old_string": "world", "new_string": "there"})),
            call_reply(("c3", "bash", {"command": "sed -i s/there/THERE/ a.txt && rm b.bin && mv c.txt d.txt"})),
            text_reply("Done."),
        ],
    )
    editor = Editor()
    async with ketch_acp(env, editor, "--permission-mode", "accept_edits") as conn:
        session = await conn.new_session(cwd=str(env.work), mcp_servers=[])
        sid = session.session_id
        await conn.prompt(session_id=sid, prompt=[acp.text_block("change things")])
        assert (env.work / "a.txt").read_bytes() == b"hello THERE\n"
        assert sorted(p.name for p in env.work.iterdir() if not p.name.startswith(".")) == ["a.txt", "d.txt"]
        editor.updates.clear()
        listed = await conn.prompt(session_id=sid, prompt=[acp.text_block("/rewind")])
        assert listed.stop_reason == "end_turn"
        assert [k for k in editor.kinds() if k != "usage_update"] == [
            "agent_message_chunk:  1. change things\n"
            "/rewind N undoes prompt N and everything after it (conversation and file changes)"
        ]
        editor.updates.clear()
        await conn.prompt(session_id=sid, prompt=[acp.text_block("/rewind 1")])
        assert [k for k in editor.kinds() if k != "usage_update"] == [
            "agent_message_chunk:rewound to before prompt 1: change things\nfiles restored: a.txt, b.bin, c.txt, d.txt"
        ]
        assert {name: (env.work / name).read_bytes() for name in original} == original
        assert sorted(p.name for p in env.work.iterdir() if not p.name.startswith(".")) == ["a.txt", "b.bin", "c.txt"]
        editor.updates.clear()
        await conn.prompt(session_id=sid, prompt=[acp.text_block("/rewind")])
        assert [k for k in editor.kinds() if k != "usage_update"] == ["agent_message_chunk:nothing to rewind: no prompt yet"]

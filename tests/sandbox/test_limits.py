"""White-box test: imports ketch implementation modules (private) directly.

Resource bounds: :class:`SandboxLimits` and its defaults, sizes, ``[sandbox.limits]``
in config.toml (a project's file may only make them stricter), the control groups
found from ``/proc/self`` for cgroup v1 and v2 (on folders standing in for the
cgroup file systems), a bound that cannot hold (fail closed), and ``ketch doctor``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ketch.cli._config import ConfigError
from ketch.cli._config import load_settings
from ketch.sandbox import BubblewrapSandbox
from ketch.sandbox import SandboxLimits
from ketch.sandbox import SandboxPolicy
from ketch.sandbox import default_sandbox
from ketch.sandbox._limits import Cgroups
from ketch.sandbox._limits import GiB
from ketch.sandbox._limits import MiB
from ketch.sandbox._limits import merge_limits
from ketch.sandbox._limits import parse_size
from ketch.sandbox._limits import physical_memory
from ketch.sandbox._limits import reached_from_output
from ketch.sandbox._limits import resolve


def test_the_defaults() -> None:
    bounds = resolve(None)
    assert (bounds.processes, bounds.cpu_seconds, bounds.file_size) == (512, 3600, 2 * GiB)
    assert bounds.memory == min(physical_memory() // 4, 2 * GiB)
    assert bounds.required == frozenset()
    given = resolve(SandboxLimits(processes=64, memory=0))
    assert (given.processes, given.memory, given.required) == (64, 0, frozenset({"processes"}))
    assert given.shown("memory") == "no bound"


@pytest.mark.parametrize("value", [-1, True, 1.5, "512"])
def test_a_bad_limit_is_named(value: object) -> None:
    with pytest.raises(ValueError) as caught:
        SandboxLimits(processes=value)  # type: ignore[arg-type]
    assert str(caught.value) == (
        f"SandboxLimits.processes must be an integer >= 0 (0: no bound) or None (the default), got {value!r}"
    )


def test_the_policy_carries_the_limits() -> None:
    policy = SandboxPolicy(workspace=Path("/w"), write=True, limits=SandboxLimits(memory=GiB))
    assert policy.limits == SandboxLimits(memory=GiB)
    assert repr(policy.limits) == "SandboxLimits(memory=1073741824)"


@pytest.mark.parametrize(
    ("text", "size"),
    [(4096, 4096), ("512M", 512 * MiB), ("2 GiB", 2 * GiB), ("1.5g", 3 * GiB // 2), ("64kb", 64 * 1024), ("0", 0)],
)
def test_sizes(text: int | str, size: int) -> None:
    assert parse_size(text, "memory") == size


@pytest.mark.parametrize("text", ["lots", "2 TB", "-1", True])
def test_a_bad_size_is_named(text: object) -> None:
    with pytest.raises(ValueError, match=r"^memory must be a size \(bytes, or a number with K, M or G\), got "):
        parse_size(text, "memory")  # type: ignore[arg-type]


def test_a_project_may_only_make_the_limits_stricter() -> None:
    ignored: list[str] = []
    user = merge_limits(None, {"processes": 2048, "memory": "1G"}, "user config")
    assert user == SandboxLimits(processes=2048, memory=GiB)
    project = merge_limits(
        user, {"processes": 0, "memory": "2G", "file_size": "1M", "cpu_seconds": 60}, "project config", only_stricter=True,
        ignored=ignored,
    )
    assert project == SandboxLimits(processes=2048, memory=GiB, cpu_seconds=60, file_size=MiB)
    assert ignored == [
        "sandbox.limits.processes = 0 (project config: it allows more than 2048; a project may only make the limits stricter)",
        "sandbox.limits.memory = '2G' (project config: it allows more than 1 GiB; a project may only make the limits stricter)",
    ]


def _config(tmp_path: Path, user: str, project: str | None = None) -> Path:
    xdg, work = tmp_path / "xdg", tmp_path / "work"
    (xdg / "ketch").mkdir(parents=True)
    (xdg / "ketch" / "config.toml").write_text(user)
    (work / ".git").mkdir(parents=True)
    if project is not None:
        (work / ".ketch").mkdir()
        (work / ".ketch" / "config.toml").write_text(project)
    return work


def test_the_config_file_sets_the_limits(tmp_path: Path) -> None:
    work = _config(tmp_path, '[sandbox.limits]\nprocesses = 128\nmemory = "512M"\n', "[sandbox.limits]\nprocesses = 4096\n")
    settings = load_settings(work, environ={"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)})
    assert settings.sandbox_limits == SandboxLimits(processes=128, memory=512 * MiB)
    assert settings.ignored == [
        f"sandbox.limits.processes = 4096 (project config {work / '.ketch' / 'config.toml'}: it allows more than 128; "
        "a project may only make the limits stricter)"
    ]


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ("processes = -3", "sandbox.limits.processes must be an integer >= 0 (0: no bound), got -3"),
        ('memory = "plenty"', "sandbox.limits.memory must be a size (bytes, or a number with K, M or G), got 'plenty'"),
        ("threads = 3", "Object contains unknown field `threads` - at `$.sandbox.limits`"),
    ],
)
def test_a_bad_limit_in_the_config_is_an_error(tmp_path: Path, table: str, error: str) -> None:
    work = _config(tmp_path, f"[sandbox.limits]\n{table}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(work, environ={"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)})
    assert str(caught.value).endswith(error)
    assert str(tmp_path / "xdg" / "ketch" / "config.toml") in str(caught.value)


# --- control groups, on folders standing in for the cgroup file systems ------------------------


def _fake_proc(tmp_path: Path, mountinfo: str, cgroup: str) -> str:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(mountinfo)
    (proc / "cgroup").write_text(cgroup)
    return str(proc)


def test_cgroup_v2_groups_are_made_below_the_nearest_delegating_folder(tmp_path: Path) -> None:
    root = tmp_path / "cg2"
    own = root / "user.slice" / "session-1.scope"
    own.mkdir(parents=True)
    (root / "cgroup.subtree_control").write_text("cpu memory pids\n")
    (root / "user.slice" / "cgroup.subtree_control").write_text("memory pids\n")
    (own / "cgroup.subtree_control").write_text("\n")
    stale = root / "user.slice" / "ketch-999999999-3"  # made by a ketch process that is gone
    stale.mkdir()
    proc = _fake_proc(
        tmp_path,
        f"30 23 0:26 / {root} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n",
        "0::/user.slice/session-1.scope\n",
    )
    groups = Cgroups(proc)
    assert (groups.version, groups.parents) == (2, {"pids": str(root / "user.slice"), "memory": str(root / "user.slice")})
    assert not stale.exists()
    group = groups.make(resolve(SandboxLimits(processes=100, memory=256 * MiB)))
    made = Path(group.made[0])
    assert made.parent == root / "user.slice"
    assert (made / "pids.max").read_text() == "100"
    assert (made / "memory.max").read_text() == str(256 * MiB)
    group.add(999999999)  # no such process
    assert (made / "cgroup.procs").read_text() == "999999999"
    assert group.reached() == []
    (made / "pids.events").write_text("max 7\n")
    (made / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")
    assert group.reached() == ["processes", "memory"]
    assert group.holds() == frozenset({"processes", "memory"})
    _empty(group.made)
    assert group.remove()
    assert not made.exists()


def test_cgroup_v1_groups_are_made_in_the_own_group_of_each_hierarchy(tmp_path: Path) -> None:
    pids, memory = tmp_path / "pids", tmp_path / "memory"
    (memory / "job" / "a").mkdir(parents=True)
    pids.mkdir()
    proc = _fake_proc(
        tmp_path,
        f"39 31 0:36 / {pids} rw,relatime - cgroup cgroup rw,pids\n"
        f"35 31 0:32 / {memory} rw,relatime - cgroup cgroup rw,memory\n"
        f"41 31 0:38 / {tmp_path / 'unified'} rw,relatime - cgroup2 cgroup2 rw\n",
        "8:pids:/\n4:memory:/job/a\n0::/\n",
    )
    groups = Cgroups(proc)
    assert (groups.version, groups.parents) == (1, {"pids": str(pids), "memory": str(memory / "job" / "a")})
    group = groups.make(resolve(SandboxLimits(processes=50, memory=GiB)))
    assert sorted(group.paths) == ["memory", "pids"]
    assert Path(group.paths["pids"], "pids.max").read_text() == "50"
    assert Path(group.paths["memory"], "memory.limit_in_bytes").read_text() == str(GiB)
    Path(group.paths["memory"], "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert group.reached() == ["memory"]
    _empty(group.made)
    assert group.remove()


def _empty(folders: list[str]) -> None:
    """Empty the stand-in groups (a real one has no files to remove), so they can go."""
    for folder in folders:
        for entry in Path(folder).iterdir():
            entry.unlink()


def test_no_writable_cgroup_means_none(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, "22 1 0:21 / /proc rw - proc proc rw\n", "0::/\n")
    groups = Cgroups(proc)
    assert (groups.version, groups.parents, groups.holds()) == (0, {}, frozenset())


def test_the_output_tells_which_bound_a_failed_command_reached() -> None:
    bounds = resolve(None)
    assert reached_from_output("MemoryError", 1, bounds) == ["memory"]
    assert reached_from_output("bash: fork: retry: Resource temporarily unavailable", 254, bounds) == ["processes"]
    assert reached_from_output("", 152, bounds) == ["cpu_seconds"]
    assert reached_from_output("", -25, bounds) == ["file_size"]
    assert reached_from_output("MemoryError", 0, bounds) == []  # it did not fail
    assert reached_from_output("MemoryError", 1, resolve(SandboxLimits(memory=0))) == []  # no bound to reach


# --- failing closed, and the doctor ------------------------------------------------------------


async def test_a_required_process_limit_that_cannot_hold_stops_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process limit the caller asked for, as root with no pids cgroup (simulated: none
    is found), while the command would run as root: the command does not run."""
    from ketch.llm import AbortSignal
    from ketch.loop import ToolContext
    from ketch.tools import BashTool
    from ketch.tools import Workspace

    box = BubblewrapSandbox()
    assert box.unavailable_reason() is None
    empty = _fake_proc(tmp_path, "", "")
    monkeypatch.setattr(box, "_cgroups", Cgroups(empty))
    ws = tmp_path / "ws"
    ws.mkdir()
    ctx = ToolContext(call_id="c", tool_name="bash", signal=AbortSignal())
    asked = BashTool(Workspace(ws), sandbox=box, limits=SandboxLimits(processes=64))
    result = await asked.execute({"command": f"touch {ws}/ran-anyway; echo ran"}, ctx)
    if os.geteuid() == 0:  # root in a workspace root owns: RLIMIT_NPROC does not hold
        assert result.is_error
        assert result.text == (
            "Command not run: the sandbox cannot hold the process limit (64) here: the command would run as root "
            "and no pids cgroup can be made (set sandbox.limits.processes = 0 to run without the limit)."
        )
        assert not (ws / "ran-anyway").exists()
    else:  # another user: RLIMIT_NPROC in the command's own user namespace holds it
        assert result.text == "ran"
    default = BashTool(Workspace(ws), sandbox=box)  # the defaults are held where they can be
    assert (await default.execute({"command": "echo ran"}, ctx)).text == "ran"


def test_the_doctor_says_which_protections_and_bounds_hold(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    (xdg / "ketch").mkdir(parents=True)
    (xdg / "ketch" / "config.toml").write_text("[sandbox.limits]\nprocesses = 99\n")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(xdg), "PYTHONPATH": src}
    done = subprocess.run(
        [sys.executable, "-m", "ketch", "doctor", "--quick"], capture_output=True, text=True, env=env, cwd=tmp_path, check=False
    )
    line = next(line for line in done.stdout.splitlines() if line[6:].startswith("sandbox "))
    assert line.startswith("ok    sandbox                bubblewrap; /proc/sys and the kernel's settings read-only; ")
    assert "seccomp filter (" in line
    assert "processes 99 (" in line
    box = default_sandbox()
    assert isinstance(box, BubblewrapSandbox)
    assert all(part in line for part in box.protections(SandboxLimits(processes=99)))

"""Background tasks: one registry for work that outlives the tool call that started it.

``bash`` with ``background: true`` and the ``subagent`` tool with ``background: true``
register their work in a :class:`TaskRegistry` and return its id at once. The model
follows it with the ``task_list``, ``task_output``, ``task_wait`` and ``task_stop``
tools (:meth:`TaskRegistry.tools`); Python code with the same operations::

    tasks = TaskRegistry()
    agent = Agent(model, tools=[BashTool(ws, tasks=tasks), *tasks.tools()])
    notify_agent(tasks, agent)            # finished tasks tell the agent
    ...
    tasks.list()                           # [TaskInfo(id="bash-1", status="running", ...)]
    out = tasks.output("bash-1", since=0)  # new text and out.next_offset
    await tasks.wait("bash-1", timeout=5)
    await tasks.stop("bash-1")             # kills the command's process group

Output is kept per task up to ``max_output`` characters (the newest); what was dropped
is counted and reported. Where a registry lives is up to its owner: the ``ketch``
command makes one per agent.
"""

from ._info import TaskFailed
from ._info import TaskInfo
from ._info import TaskNotFoundError
from ._info import TaskOutput
from ._info import TaskStatus
from ._notify import Notified
from ._notify import TaskNotifier
from ._notify import notification_text
from ._notify import notify_agent
from ._registry import DEFAULT_MAX_OUTPUT
from ._registry import TASK_TOOLS
from ._registry import TaskRegistry

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "TASK_TOOLS",
    "Notified",
    "TaskFailed",
    "TaskInfo",
    "TaskNotFoundError",
    "TaskNotifier",
    "TaskOutput",
    "TaskRegistry",
    "TaskStatus",
    "notification_text",
    "notify_agent",
]

"""Long-term memory: facts an agent saves in one session and recalls in a later one.

:class:`Memory` is a capability (``Agent(model, capabilities=[Memory(path)])``) giving the
model the ``memory`` tool (Claude's memory tool contract: a ``/memories`` directory it
views and edits with ``view``, ``create``, ``str_replace``, ``insert``, ``delete`` and
``rename``) and a section of the system prompt telling it to use it. Memories are kept by
a :class:`MemoryStore`: :class:`FileMemoryStore` (files under a directory; no path or
link reaches outside it) by default, or any object with the protocol's six methods.
:func:`scoped_memory_dir` gives a directory per user and project.
"""

from ._store import MAX_MEMORY_FILE_BYTES
from ._store import FileMemoryStore
from ._store import MemoryEntry
from ._store import MemoryStore
from ._store import MemoryStoreError
from ._store import default_memory_dir
from ._store import memory_path
from ._store import scoped_memory_dir
from ._tool import MEMORY_INSTRUCTIONS
from ._tool import Memory
from ._tool import MemoryTool

__all__ = [
    "MAX_MEMORY_FILE_BYTES",
    "MEMORY_INSTRUCTIONS",
    "FileMemoryStore",
    "Memory",
    "MemoryEntry",
    "MemoryStore",
    "MemoryStoreError",
    "MemoryTool",
    "default_memory_dir",
    "memory_path",
    "scoped_memory_dir",
]

"""One writer per session: an exclusive ``flock`` on a lock file, held until released.

The kernel drops an ``flock`` when its holder's descriptor closes, also when the process
is killed, so a crash never leaves a session locked. The holder writes its pid into the
file so that a refused opener can name it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ._entries import SessionLockedError


class FileLock:
    """An exclusive, non-blocking lock on ``path`` for ``session_id``."""

    __slots__ = ("_fd", "path", "session_id")

    def __init__(self, path: Path, session_id: str) -> None:
        self.path = path
        self.session_id = session_id
        self._fd: int | None = None

    def acquire(self) -> FileLock:
        """Take the lock (returns this lock) or raise :class:`SessionLockedError` naming
        the holder's pid."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                raw = os.pread(fd, 32, 0)
            finally:
                os.close(fd)
            try:
                pid: int | None = int(raw.decode("ascii").strip())
            except ValueError:
                pid = None
            raise SessionLockedError(self.session_id, pid) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        except OSError:
            pass  # the pid is only for the error message of a refused opener
        self._fd = fd
        return self

    def release(self, *, unlink: bool = False) -> None:
        """Drop the lock (idempotent); ``unlink`` removes the lock file first."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if unlink:
                self.path.unlink(missing_ok=True)
            else:
                os.ftruncate(fd, 0)
        except OSError:
            pass
        finally:
            os.close(fd)

    @contextmanager
    def released_on_error(self, *, unlink: bool = False) -> Iterator[FileLock]:
        """Run the body holding the lock, which stays held after it (for the writer the
        body makes); when the body raises, the lock is released (``unlink``: its file
        removed) and the error goes on."""
        try:
            yield self
        except BaseException:
            self.release(unlink=unlink)
            raise

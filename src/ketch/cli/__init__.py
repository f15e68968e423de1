"""The ``ketch`` command: headless runs, the interactive session, ``models``, ``doctor``.

Entry point: :func:`ketch.cli._main.main`. Nothing here is imported by ``import ketch``.
"""

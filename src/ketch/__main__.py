"""``python -m ketch``: the ``ketch`` command."""

from .cli._main import main

raise SystemExit(main())

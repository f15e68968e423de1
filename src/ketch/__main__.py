"""``python -m ketch``: the ``ketch`` command."""

from .cli.main import main

raise SystemExit(main())

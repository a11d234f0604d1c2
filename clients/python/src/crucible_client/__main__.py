"""`python -m crucible_client`: the crucible-client command."""

from .cli import main

raise SystemExit(main())

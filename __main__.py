"""`python -m tt ...` is the `tt` command."""

import sys

from .cli.main import main

sys.exit(main())

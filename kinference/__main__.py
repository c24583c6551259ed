"""`python -m kinference` is the `kinference` command."""

import sys

from kinference.cli import main

sys.exit(main())

"""``python -m grammar_parse`` runs the command line."""

import sys

from ._cli import main

sys.exit(main())

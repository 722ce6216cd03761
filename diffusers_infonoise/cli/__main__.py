"""``python -m diffusers_infonoise.cli``: the ``infonoise`` command."""

import sys

from . import main

sys.exit(main())

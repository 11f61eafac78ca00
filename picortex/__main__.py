"""`python -m picortex` is the same as the `picortex` command."""

import sys

from picortex.cli import main

sys.exit(main())

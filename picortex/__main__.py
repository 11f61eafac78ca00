"""`python -m picortex` is the same as the `picortex` command."""

from picortex.cli import entry

entry()

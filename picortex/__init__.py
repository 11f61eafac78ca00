"""picortex: a long-lived Discord bot runtime built as supervised trio actors."""

# The one place the version is written: pyproject.toml reads it from here.
__version__ = "0.1.0"
# Sent in the REST User-Agent as Discord asks; the same URL as pyproject's [project.urls].
PROJECT_URL = "https://github.com/picortex/picortex"

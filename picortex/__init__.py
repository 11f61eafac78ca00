"""picortex: a long-lived Discord bot runtime built as supervised trio actors."""

__version__ = "0.1.0"
PROJECT_URL = "https://github.com/picortex/picortex"

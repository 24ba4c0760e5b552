"""pgval: end-to-end processing-guarantee validation for stream processors."""

__version__ = "0.1.0"

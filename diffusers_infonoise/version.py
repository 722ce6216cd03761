"""The package's version, the one place it is written (pyproject.toml reads it; the package and the stored schedule report it)."""

__version__ = "0.3.0"

"""The package's version: one line, read by hatch at the build and by whatever reports it."""

__version__ = "0.1.0"

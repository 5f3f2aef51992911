"""The ``adcompile`` command line (``adcompile demo``, ``check``, ``bench`` ...)."""

from .commands import main

__all__ = ["main"]

"""Stage 1, the intermediate representation every later stage reads.

- ``ops``: the op table's machinery: ``Op``, dispatch, registration, the generic
  functions derivative rules use.
- ``arithmetic``, ``elementary``, ``piecewise``: the op table itself, one family of
  primitives each, every primitive defined once (value, derivative rules, code
  templates, SymPy form, algebra). Imported here, so ``ops.OPS`` holds them all
  whenever any module of this package is imported; ``BUILTIN`` names them, in
  the order they are registered (a user's ``ad.primitive`` comes after them).
- ``tape``: the flat SSA tape (nodes, guards, outputs) and ``Param``.
- ``passes``: tape-to-tape rewrites (dead code, constants, CSE, simplification).
- ``outputs``: output trees (how a function's result is laid out in a flat vector).

Imports nothing else from adcompile.
"""

from . import arithmetic, elementary, piecewise  # noqa: F401  (they fill ops.OPS)
from .ops import OPS

#: The built-in ops' names, as registered by the table's modules.
BUILTIN: tuple[str, ...] = tuple(OPS)

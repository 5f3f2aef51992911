"""Stage 1, the intermediate representation every later stage reads.

- ``ops``: the op table. Each primitive is defined once: value, derivative rules,
  code templates, SymPy form, algebra.
- ``tape``: the flat SSA tape (nodes, guards, outputs) and ``Param``.
- ``passes``: tape-to-tape rewrites (dead code, constants, CSE, simplification).
- ``outputs``: output trees (how a function's result is laid out in a flat vector).

Imports nothing else from adcompile.
"""

"""SymPy, the referee: tapes as SymPy expressions and derivative cross-checks.

- ``bridge``: tape <-> SymPy (``to_sympy``, ``from_sympy``).
- ``transforms``: ``ad.to_sympy`` and SymPy-made value-and-grad functions.
- ``check``: ``check_grad`` and ``check_jacobian`` (compiled code, interpreter,
  SymPy and finite differences, side by side).

SymPy is imported on first use, never with ``import adcompile``.
"""

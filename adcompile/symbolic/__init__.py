"""SymPy, the referee: tapes as SymPy expressions and derivative cross-checks.

- ``bridge``: tape <-> SymPy (``to_sympy``, ``from_sympy``).
- ``transforms``: ``ad.to_sympy`` and SymPy-made value-and-grad functions.
- ``check``: ``check_grad`` and ``check_jacobian`` (compiled code, interpreter,
  SymPy and finite differences, side by side), in pieces: ``check`` runs
  ``check_grad`` and is where the public names are imported from;
  ``jacobian_check`` runs ``check_jacobian``; ``check_setup`` (the point, the
  tolerances, the time bound), ``finite`` (finite differences), ``check_sympy``
  (SymPy's derivatives at the point) and ``check_report`` (the reports and
  their verdicts) serve both.

SymPy is imported on first use, never with ``import adcompile``.
"""

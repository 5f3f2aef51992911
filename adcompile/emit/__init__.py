"""Stage 5, printing: programs in, readable source text out.

- ``codegen``: straight-line code, one statement per tape slot, and ``CodeFacts``.
- ``loopgen``: loop programs (forward and adjoint loops) as Python for Numba.
- ``fold``: tape -> segments -> loop IR -> reverse -> source, the loop path end to
  end (``fold_program``, ``loop_source``, ``batch_source``).

Reads the stages below it; never runs what it prints.
"""

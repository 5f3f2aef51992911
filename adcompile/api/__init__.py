"""Stage 7, the public transforms users call.

- ``transform``: ``grad``, ``value_and_grad``, ``jit``, ``trace``, ``show_code``:
  tracing per specialisation, guards, retraces.
- ``derived``: ``jacobian``, ``hessian``, ``jvp``, ``hvp``.
- ``vmap``, ``step`` (``compile_loss``), ``explain``, ``export``, ``extend``
  (``ad.primitive``: user-defined ops).

Reads every stage below it; nothing below reads it.
"""

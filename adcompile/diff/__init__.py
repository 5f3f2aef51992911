"""Stage 3, derivatives and evaluation on the tape.

- ``reverse``: the reverse-mode transform, tape -> gradient tape.
- ``forward``: forward mode (``jvp``), tape -> tangent tape.
- ``interpret``: evaluate a tape directly (dynamic graphs, cross-checks).

Reads ``ir`` and ``trace``.
"""

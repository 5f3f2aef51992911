"""Stage 6, running printed code: loading it, compiling it with Numba, calling it.

- ``jit``: the disk cache, loading generated modules, Numba compilation, and the
  compiled-code classes.
- ``entries``: the call paths into compiled code (argument checks, the direct entry).
- ``batch``: batch-generic code that serves every batch length.

Reads the stages below it.
"""

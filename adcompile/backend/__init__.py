"""Stage 6, running printed code: loading it, compiling it with Numba, calling it.

- ``program``: ``CompiledProgram``, the one interface of compiled code that the
  stages after this one use.
- ``compiled``: the compiled programs of a tape (straight-line code, loops, the tape
  interpreter, a loop over basis vectors) and the Numba functions they make.
- ``jit``: the disk cache, loading generated modules, Numba compilation (the only
  module that imports Numba).
- ``entries``: the call paths into compiled code (argument checks, the direct entry).
- ``batch``: batch-generic code that serves every batch length.

Reads the stages below it.
"""

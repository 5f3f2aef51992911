"""Stage 6, running printed code: compiling it with Numba, calling it.

- ``program``: ``CompiledProgram``, the one interface of compiled code that the
  stages after this one use.
- ``compiled``: the compiled programs of a tape (straight-line code, loops, the tape
  interpreter, a loop over basis vectors) and the Numba functions they make.
- ``jit``: Numba compilation (the only module that imports Numba), with Numba's
  disk cache beside the generated files, which ``trace.loader`` writes and loads.
- ``entries``: the call paths into compiled code (argument checks, the direct entry).
- ``batch``: batch-generic code that serves every batch length.

Reads the stages below it.
"""

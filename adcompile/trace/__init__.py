"""Stage 2, tracing: Python code in, a tape out.

- ``value``: the micrograd-style ``Value`` that records ops and runs eager
  ``backward()`` (the one module that reads a Value's slots), with around it
  ``mode`` (no_grad, debug_nans, tracing, the user's line), ``methods`` (the
  source of its generated operator methods and reverse steps), ``numeric``
  (comparisons, float(), int(), round() ...), ``traced`` (``.data`` while
  tracing), ``ufuncs`` (NumPy's ufuncs on Values), ``functions`` (``ad.sin`` ...)
  and ``tapes`` (a graph of Values laid out as a tape); ``tensor``: arrays of
  Values with NumPy's methods.
- ``arguments``: flattening a function's arguments into the tape's inputs.
- ``captures``, ``rebind``, ``watching``, ``randomness``: what a trace read from
  outside its arguments, and how each call checks it is unchanged (or refuses it).
- ``lengths``: branches on a batch length, recorded as guards on the length.
- ``checking``: check mode (``ADCOMPILE_CHECK=1``).
- ``loader``: generated source -> a module run from a real file (the cache
  directory's checks included). It sits here, the lowest stage that runs
  generated code (``Value``'s methods), and every later stage loads through it.

Reads only ``ir``.
"""

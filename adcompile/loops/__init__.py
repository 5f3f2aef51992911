"""Stage 4, loops: a long tape's repeated structure becomes a loop program.

- ``segments``: find runs of repeated tape structure.
- ``ir``: the loop IR as data (blocks, loops with affine reads, programs).
- ``build``: a program built from a tape and its runs; long bodies nested.
- ``generic``: one program for every batch length.
- ``fuse``: fuse adjacent loops of one trip count.
- ``grad``: reverse mode on the loop IR (adjoint loops).
- ``layout``: where each loop's values are stored for the adjoint.
- ``array_scan``: an array tape's repeated runs folded into scans (array code's
  loop nests).

Reads ``ir`` and ``diff``.
"""

"""Stage 4, loops: a long tape's repeated structure becomes a loop program.

- ``segments``: find runs of repeated tape structure.
- ``ir``: the loop IR (blocks, loops with affine reads) built from those runs.
- ``fuse``: fuse adjacent loops of one trip count.
- ``grad``: reverse mode on the loop IR (adjoint loops).
- ``layout``: where each loop's values are stored for the adjoint.

Reads ``ir`` and ``diff``.
"""

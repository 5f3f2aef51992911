"""Data-parallel gradients and many-point evaluation on Dask (optional extra).

``pip install "adcompile[distributed]"`` installs Dask (``dask[array]`` and
``distributed``); nothing here imports it before it is used.

``value_and_grad(loss, argnums=0, reduction="mean", client=None)`` is
``ad.value_and_grad`` for a loss over the rows of its data arguments (the
arrays that are not differentiated and share a leading length): the rows are
split into chunks (a ``dask.array`` keeps its own row chunks), each chunk's
value and gradient is computed on a worker, and the chunks are combined by a
tree reduction, weighted by their lengths for a mean.

What moves per call: the parameters (the differentiated and other small
arguments), sent once to every worker (inside the chunk's task when there
is one chunk per worker, else as one small task per worker); the chunk results (one float
vector of ``1 + len(theta)`` per chunk) up the reduction tree; the answer.
The data go to the workers once (a ``dask.array`` already lives there; NumPy
data are sent on the first call and kept while the same, unchanged arrays
are passed). The compiled program goes once per worker: its generated
source and metadata (about a dozen kilobytes), which each worker compiles
once, or loads from its own Numba cache, so the worker never needs the
user's function. Only where there is no batch-generic program for the loss
is the function itself sent (pickled by value with cloudpickle, as Dask
does), and traced once per worker.

``vmap(f, points, client=None)`` evaluates ``ad.vmap(f)`` on row chunks of
``points`` across the workers and concatenates the results.

The package: ``cluster`` (the Dask client), ``gradient`` (``value_and_grad``, on the
client), ``worker`` (what its chunks run on the workers) and ``mapping`` (``vmap``).
"""

from .cluster import INSTALL, dask_distributed, get_client
from .gradient import SAMPLE_ROWS, SPLIT_EVERY, DistributedValueAndGrad, value_and_grad
from .mapping import vmap
from .worker import GuardFailed

__all__ = [
    "DistributedValueAndGrad",
    "GuardFailed",
    "INSTALL",
    "SAMPLE_ROWS",
    "SPLIT_EVERY",
    "dask_distributed",
    "get_client",
    "value_and_grad",
    "vmap",
]

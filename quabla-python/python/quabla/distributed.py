"""Data parallelism across processes and machines (api.md §20): the process group of an
``mpirun`` launch (``init``, ``rank``, ``size``, ``barrier``), collectives on tensors in a fixed
reduction order (``all_reduce``, ``broadcast``, ``all_gather``), data-parallel
``value_and_grad``, and checkpoints written once by rank 0 (``save``, ``load``). The
data-parallel trainer is ``quabla.optim.Trainer(..., distributed=True)``. A process started
without a launcher is rank 0 of 1. docs/distributed.md is the guide."""

from ._quabla import _distributed as _native

init = _native.init
rank = _native.rank
size = _native.size
barrier = _native.barrier
finalize = _native.finalize
all_reduce = _native.all_reduce
broadcast = _native.broadcast
all_gather = _native.all_gather
value_and_grad = _native.value_and_grad
save = _native.save
load = _native.load
#: Whether this build can join an MPI launch (built with the ``mpi`` feature).
mpi_available = _native.mpi_available

__all__ = [
    "init",
    "rank",
    "size",
    "barrier",
    "finalize",
    "all_reduce",
    "broadcast",
    "all_gather",
    "value_and_grad",
    "save",
    "load",
    "mpi_available",
]

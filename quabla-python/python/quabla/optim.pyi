"""Type stubs of ``quabla.optim`` (api.md §16; docs/python.md, "Optimizers")."""

from typing import Any, Callable, Optional, Sequence, TypedDict, Union

from . import Tensor

PyTree = Any
Rate = Union[float, "Schedule", Callable[[Tensor], Union[float, Tensor]]]

class AdamState(TypedDict):
    step: Tensor
    m: PyTree
    v: PyTree

class Schedule:
    """A built-in schedule: ``schedule(step)`` is the rate after ``step`` completed updates
    (a float for an int step, a rank-0 tensor for a tensor step)."""
    def __call__(self, step: Union[int, Tensor]) -> Union[float, Tensor]: ...

class Optimizer:
    """``Adam``, ``AdamW`` or ``SGD``: functional, ``init`` then ``update`` per step."""
    def init(self, params: PyTree) -> Optional[dict[str, Any]]: ...
    def update(
        self, params: PyTree, grads: PyTree, state: Optional[dict[str, Any]]
    ) -> tuple[PyTree, Optional[dict[str, Any]]]: ...

def Adam(
    learning_rate: Optional[Rate] = None,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-08,
    *,
    clip_norm: Optional[float] = None,
) -> Optimizer: ...

def AdamW(
    learning_rate: Optional[Rate] = None,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-08,
    weight_decay: float = 0.0001,
    *,
    clip_norm: Optional[float] = None,
) -> Optimizer: ...

def SGD(learning_rate: Optional[Rate] = None, *, clip_norm: Optional[float] = None) -> Optimizer: ...

class LBFGS:
    def __init__(
        self,
        history: int = 10,
        max_iterations: int = 500,
        max_evaluations: Optional[int] = None,
        tolerance_grad: float = 1e-07,
        tolerance_change: float = 1e-09,
        line_search: str = "strong_wolfe",
    ) -> None: ...
    def minimize(
        self, fun: Callable[..., Tensor], params: PyTree, *args: Any
    ) -> tuple[PyTree, dict[str, Any]]: ...

class Trainer:
    def __init__(
        self,
        loss: Callable[..., Tensor],
        params: PyTree,
        optimizer: Optimizer,
        *data: Any,
        device: str = "cpu",
        batch_argnums: Optional[Sequence[int]] = None,
        precision: Optional[str] = None,
        distributed: bool = False,
        shard_argnums: Optional[Sequence[int]] = None,
        reduction: str = "mean",
    ) -> None: ...
    def step(self, *batch: Any) -> None: ...
    def loss(self) -> Tensor: ...
    @property
    def last_loss(self) -> Optional[Tensor]: ...
    @property
    def steps(self) -> int: ...
    @property
    def params(self) -> PyTree: ...

def clip_by_global_norm(grads: PyTree, max_norm: float) -> tuple[PyTree, float]: ...

def constant(value: float) -> Schedule: ...

def exponential_decay(
    init_value: float,
    transition_steps: int,
    decay_rate: float,
    transition_begin: int = 0,
    staircase: bool = False,
    end_value: Optional[float] = None,
) -> Schedule: ...

def cosine_decay(init_value: float, decay_steps: int, alpha: float = 0.0) -> Schedule: ...

def warmup_cosine_decay(
    init_value: float,
    peak_value: float,
    warmup_steps: int,
    decay_steps: int,
    end_value: float = 0.0,
) -> Schedule: ...

def piecewise_constant(boundaries: Sequence[int], values: Sequence[float]) -> Schedule: ...

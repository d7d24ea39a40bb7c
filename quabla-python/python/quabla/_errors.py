"""Quabla's exception and warning classes (errors.md §1.1).

They are Python classes because two of them have two builtin bases; the native module raises
them by looking them up here, so ``except TypeError`` keeps catching a ``TracerError``.
"""


class QuablaError(Exception):
    """Base class of Quabla's own exceptions."""


class TracerError(QuablaError, TypeError):
    """A concrete value was needed but a traced one was given."""


class UnsupportedOperationError(QuablaError, ValueError, NotImplementedError):
    """A backend, the build or a transform cannot handle an operation.

    ``op`` names the operation, library or option concerned; ``device`` is the device
    (``"cuda:1"``) or ``None`` when no device is involved.
    """

    def __init__(self, message, op=None, device=None):
        super().__init__(message)
        self.op = op
        self.device = device


class RetraceWarning(UserWarning):
    """A trace cache evicted an entry (a new signature exceeded ``max_traces``)."""

"""The data plane: inference and model queries, independent of any wire protocol.

Routes decode a request into arrays, hand them to `DataPlane.infer` in a worker thread, and encode
what comes back; the data plane resolves names against the signature (alias or graph tensor), checks
dtypes and shapes naming the alias, and runs the servable under a lease so that an unload waits for it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from engine.plan import format_shape
from service.errors import BadRequest, DeadlineExceeded
from service.manager import ModelManager
from service.servable import Servable
from service.signatures import Signature, TensorSpec

__all__ = ["InferResult", "DataPlane", "check_input"]

T = TypeVar("T")


@dataclass(frozen=True)
class InferResult:
    """The outputs of one request, in the order asked for, with the version that computed them."""

    model: str
    version: int
    signature: Signature
    outputs: tuple[tuple[TensorSpec, np.ndarray], ...]


def check_input(spec: TensorSpec, array: np.ndarray) -> None:
    """A request's tensor against what its signature declares; the message names the alias."""
    if spec.dtype is not None and array.dtype != spec.dtype:
        text = spec.dtype == np.dtype(object) and array.dtype.kind in "SUO"
        if not text:
            raise BadRequest(f"input '{spec.alias}' expects dtype {_dtype_name(spec.dtype)}, got {_dtype_name(array.dtype)}")
    if spec.shape is not None:
        if array.ndim != len(spec.shape) or any(d is not None and d != s for d, s in zip(spec.shape, array.shape)):
            raise BadRequest(f"input '{spec.alias}' expects shape {format_shape(spec.shape)}, got {format_shape(array.shape)}")


def _dtype_name(dtype: np.dtype) -> str:
    return "string" if dtype == np.dtype(object) else dtype.name


class DataPlane:
    """Runs requests on a ModelManager's servables, in a thread pool, within a deadline.

        >>> plane = DataPlane(manager, threads=8, timeout_s=60)
        >>> result = plane.infer("iris_classifier", {"features": x})
    """

    def __init__(self, manager: ModelManager, *, threads: int, timeout_s: float):
        self.manager = manager
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="tensorgate-infer")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def call(self, fn: Callable[..., T], *args: Any, timeout_s: float | None = None) -> T:
        """Run `fn(*args)` in the worker pool, off the event loop; DeadlineExceeded past the timeout.

        A timed-out computation cannot be interrupted mid-kernel; its lease keeps the version loaded
        until it ends, and its result is dropped.
        """
        timeout = self.timeout_s if timeout_s is None else min(timeout_s, self.timeout_s)
        future = asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args))
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise DeadlineExceeded(f"request timed out after {timeout:g} s") from None

    def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray],
        outputs: Sequence[str] | None = None,
        *,
        version: int | None = None,
        label: str | None = None,
        signature_name: str | None = None,
    ) -> InferResult:
        """Run one request (blocking; call it through `call`). Input and output names are signature
        aliases or graph tensor names; `outputs=None` means every output of the signature."""
        with self.manager.lease(model, version, label) as servable:
            return self.run(servable, servable.signature(signature_name), inputs, outputs)

    def run(
        self, servable: Servable, signature: Signature, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] | None
    ) -> InferResult:
        """Run a request on a leased servable (see `infer`)."""
        feeds: dict[str, np.ndarray] = {}
        for name, array in inputs.items():
            spec = servable.resolve_input(signature, name)
            check_input(spec, array)
            if spec.tensor in feeds:
                raise BadRequest(f"input '{name}' names tensor '{spec.tensor}', which is already fed")
            feeds[spec.tensor] = array
        specs = list(signature.outputs) if outputs is None else [servable.resolve_output(signature, n) for n in outputs]
        if len({s.alias for s in specs}) != len(specs):
            raise BadRequest(f"an output is requested more than once: {[s.alias for s in specs]}")
        values = servable.run(feeds, [s.tensor for s in specs])
        return InferResult(servable.model, servable.version, signature, tuple(zip(specs, values)))

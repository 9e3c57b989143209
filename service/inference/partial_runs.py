"""Partial runs: one execution of a graph spread over several requests, as TensorFlow's
`Session.partial_run_setup` / `partial_run` spread it over several calls.

A client declares its feeds and fetches once and gets a handle; each step feeds some of the declared
feeds and fetches what those make computable. The engine keeps the execution's state; this registry
gives each run a handle of the server's own, ties it to the model version that set it up (a handle
is valid only under its model, and dies with that version's load), checks each step against the
declaration so that errors name the client's own spellings, and remembers for a while why a handle
ended (finished, closed, expired, unloaded) so that its 404 can say so.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine import errors as engine_errors
from service.errors import BadRequest, NotFound, TooManyRequests, Unavailable
from service.repository.manager import ModelManager
from service.repository.servable import Servable
from service.repository.signatures import Signature, TensorSpec

__all__ = ["PartialRun", "PartialRuns"]

# Ended handles remembered (with the reason their 404 gives), oldest forgotten first.
_ENDED_KEPT = 4096


@dataclass(eq=False)
class PartialRun:
    """One open partial run: its handle, the version it runs on, what it declared and what it has
    fed and fetched so far. Feeds and fetches map graph tensors to the names the setup used."""

    handle: str
    model: str
    version: int
    signature: Signature
    feeds: dict[str, str]
    fetches: dict[str, str]
    targets: tuple[str, ...]
    timeout_s: float
    engine_handle: str
    servable: weakref.ref  # dead once the version is unloaded
    fed: set[str] = field(default_factory=set)
    fetched: set[str] = field(default_factory=set)
    last_used: float = field(default_factory=time.monotonic)

    def finished(self) -> bool:
        return self.fed == set(self.feeds) and self.fetched == set(self.fetches)


def _quoted(names) -> str:
    return ", ".join(f"'{n}'" for n in names) or "none"


class PartialRuns:
    """The open partial runs of a server, by handle.

        >>> runs = PartialRuns(manager)
        >>> run = runs.open(servable, servable.signature(None), ["a", "b"], ["h", "y"])
        >>> with runs.lease(runs.find("m", run.handle)) as servable:
        ...     feeds, fetches = runs.resolve_step(run, servable, ["a"], ["h"])
        ...     (h,) = runs.step(run, servable, {"a:0": a}, ["h:0"])
    """

    def __init__(self, manager: ModelManager):
        self._manager = manager
        self._lock = threading.Lock()
        self._runs: dict[str, PartialRun] = {}
        self._ended: OrderedDict[str, tuple[str, str]] = OrderedDict()  # handle -> (model, why it ended)

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)

    # --- setting up --------------------------------------------------------------------------------

    def open(self, servable: Servable, signature: Signature, feeds: Sequence[str], fetches: Sequence[str],
             targets: Sequence[str] = ()) -> PartialRun:
        """Declare a partial run on a leased servable. Names are signature aliases or graph tensors
        (targets are node names); BadRequest names the first one that does not resolve, and
        TooManyRequests says the version has all its partial runs open already."""
        self.sweep()
        feed_specs = self._declare([servable.resolve_input(signature, n) for n in feeds], "feed")
        fetch_specs = self._declare([servable.resolve_output(signature, n) for n in fetches], "fetch")
        graph = servable.session.graph
        unknown = [t for t in targets if t.lstrip("^") not in graph]
        if unknown:
            raise BadRequest(f"unknown target(s) {_quoted(unknown)}: targets are node names of the graph")
        if not feed_specs and not fetch_specs and not targets:
            raise BadRequest("a partial run needs at least one feed, fetch or target")
        session = servable.session
        try:
            engine_handle = session.prun_setup(list(feed_specs), list(fetch_specs), tuple(targets))
        except engine_errors.PartialRunLimitError as e:
            raise TooManyRequests(
                f"model '{servable.model}' version {servable.version}: {e} (TENSORGATE_PRUN_MAX_HANDLES); "
                f"idle runs expire after {session.options.prun_timeout_s:g} s",
                headers={"Retry-After": "1"},
            ) from None
        run = PartialRun(
            handle=secrets.token_urlsafe(18),
            model=servable.model,
            version=servable.version,
            signature=signature,
            feeds=feed_specs,
            fetches=fetch_specs,
            targets=tuple(targets),
            timeout_s=session.options.prun_timeout_s,
            engine_handle=engine_handle,
            servable=weakref.ref(servable),
        )
        with self._lock:
            self._runs[run.handle] = run
        return run

    @staticmethod
    def _declare(specs: list[TensorSpec], role: str) -> dict[str, str]:
        declared: dict[str, str] = {}
        for spec in specs:
            if spec.tensor in declared:
                raise BadRequest(f"{role} '{spec.alias}' names tensor '{spec.tensor}', which '{declared[spec.tensor]}' already declares")
            declared[spec.tensor] = spec.alias
        return declared

    # --- finding and leasing -----------------------------------------------------------------------

    def find(self, model: str, handle: str) -> PartialRun:
        """The open run `handle` of `model`; NotFound, saying why when the handle ended recently."""
        with self._lock:
            run = self._runs.get(handle)
            if run is not None and run.model == model:
                if time.monotonic() - run.last_used <= run.timeout_s:
                    return run
                self._end(run, f"expired: it was idle for more than {run.timeout_s:g} s")
            ended = self._ended.get(handle)
        if ended is not None and ended[0] == model:
            raise NotFound(f"partial run '{handle}' of model '{model}' has ended: {ended[1]}")
        raise NotFound(f"model '{model}' has no partial run '{handle}'")

    @contextlib.contextmanager
    def lease(self, run: PartialRun) -> Iterator[Servable]:
        """The servable the run was set up on, held until the block ends; NotFound (and the run
        ends) when that version has been unloaded or reloaded since."""
        with contextlib.ExitStack() as stack:
            if self._manager.needs_load(run.model, run.version):  # evicted or idle-unloaded since its setup
                raise self._gone(run, f"version {run.version} of model '{run.model}' was unloaded (out of memory on purpose)")
            try:
                servable = stack.enter_context(self._manager.lease(run.model, run.version))
            except (NotFound, Unavailable) as e:
                raise self._gone(run, f"version {run.version} of model '{run.model}' was unloaded ({e.message})") from None
            if servable is not run.servable():
                raise self._gone(run, f"version {run.version} of model '{run.model}' was reloaded")
            yield servable

    def _gone(self, run: PartialRun, why: str) -> NotFound:
        with self._lock:
            self._end(run, why)
        return NotFound(f"partial run '{run.handle}' of model '{run.model}' has ended: {why}")

    # --- steps -------------------------------------------------------------------------------------

    def resolve_step(self, run: PartialRun, servable: Servable, inputs: Sequence[str],
                     outputs: Sequence[str]) -> tuple[list[TensorSpec], list[TensorSpec]]:
        """A step's input and output names as specs, each checked against the declaration: declared
        at setup, and not fed (or fetched) before. Whether a fetch can be computed yet from what has
        been fed is the engine's to say."""
        feeds = [servable.resolve_input(run.signature, name) for name in inputs]
        fetches = [servable.resolve_output(run.signature, name) for name in outputs]
        with self._lock:
            fed, fetched = set(run.fed), set(run.fetched)
        self._check(run, feeds, run.feeds, fed, "input", "feeds", "fed")
        self._check(run, fetches, run.fetches, fetched, "output", "fetches", "fetched")
        return feeds, fetches

    @staticmethod
    def _check(run: PartialRun, specs: list[TensorSpec], declared: Mapping[str, str], done: set[str],
               role: str, kinds: str, verb: str) -> None:
        seen: dict[str, str] = {}
        for spec in specs:
            where = f"partial run '{run.handle}': {role} '{spec.alias}'"
            if spec.tensor not in declared:
                raise BadRequest(f"{where} is not one of the {kinds} declared at setup ({_quoted(declared.values())})")
            if spec.tensor in done:
                raise BadRequest(f"{where} was already {verb} in an earlier step")
            if spec.tensor in seen:
                raise BadRequest(f"{where} names tensor '{spec.tensor}', which '{seen[spec.tensor]}' names too")
            seen[spec.tensor] = spec.alias

    def step(self, run: PartialRun, servable: Servable, feeds: Mapping[str, np.ndarray],
             fetches: Sequence[str]) -> tuple[list[np.ndarray], float]:
        """Feed graph tensors and fetch graph tensors on the engine (in a worker thread); returns
        the values and the seconds the engine took. A run whose every feed has been fed and every
        fetch fetched is finished and its handle ends."""
        with self._lock:
            if self._runs.get(run.handle) is not run:
                why = self._ended.get(run.handle, ("", "it was closed"))[1]
                raise NotFound(f"partial run '{run.handle}' of model '{run.model}' has ended: {why}")
            run.last_used = time.monotonic()
        start = time.perf_counter()
        try:
            values = servable.session.prun(run.engine_handle, dict(feeds), list(fetches))
        except engine_errors.PartialRunNotFoundError:
            raise self._gone(run, f"expired: it was idle for more than {run.timeout_s:g} s") from None
        except engine_errors.PartialRunError as e:
            # Refused before anything ran: the run goes on. The engine's message names its own
            # handle; the client knows ours.
            raise BadRequest(str(e).replace(run.engine_handle, run.handle)) from None
        except engine_errors.FeedError:
            raise  # a value refused before it was fed: the run goes on
        except engine_errors.EngineError as e:
            # A step that failed while running leaves a half-computed state; the engine ends the
            # run, as TensorFlow does. The error itself goes back to the client.
            with self._lock:
                self._end(run, f"a step failed: {str(e).splitlines()[0]}")
            raise
        seconds = time.perf_counter() - start
        with self._lock:
            run.fed.update(feeds)
            run.fetched.update(fetches)
            run.last_used = time.monotonic()
            finished = run.finished() and self._runs.get(run.handle) is run
            if finished:
                self._end(run, "it finished: every feed was fed and every fetch fetched")
        if finished:
            _close_quietly(servable, run.engine_handle)  # the engine drops a finished run itself; make sure
        return values, seconds

    # --- ending ------------------------------------------------------------------------------------

    def close(self, model: str, handle: str) -> None:
        """End a run before it finishes (DELETE); NotFound if it is not open."""
        run = self.find(model, handle)
        with self._lock:
            if self._runs.get(handle) is not run:
                raise NotFound(f"model '{model}' has no partial run '{handle}'")
            self._end(run, "it was closed")
        servable = run.servable()
        if servable is not None:
            _close_quietly(servable, run.engine_handle)

    def sweep(self) -> None:
        """Forget runs idle past their timeout (the engine expires its side on its own) and runs
        whose version has been unloaded."""
        now = time.monotonic()
        with self._lock:
            for run in list(self._runs.values()):
                if now - run.last_used > run.timeout_s:
                    self._end(run, f"expired: it was idle for more than {run.timeout_s:g} s")
                elif run.servable() is None:
                    self._end(run, f"version {run.version} of model '{run.model}' was unloaded")

    def _end(self, run: PartialRun, why: str) -> None:
        """Called with the lock held."""
        if self._runs.get(run.handle) is run:
            del self._runs[run.handle]
        self._ended[run.handle] = (run.model, why)
        while len(self._ended) > _ENDED_KEPT:
            self._ended.popitem(last=False)


def _close_quietly(servable: Servable, engine_handle: str) -> None:
    try:
        servable.session.prun_close(engine_handle)
    except engine_errors.PartialRunNotFoundError:
        pass

"""The compiled-kernel layer (kernels.jit): which plans use compiled loops, when they are compiled (while a
plan is built, never on a request), where numba caches them, and the settings that control it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import engine
from engine import builder as gb
from kernels import jit
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
needs_numba = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")


def _depthwise_graph():
    g = gb.GraphBuilder()
    with g.as_default():
        x = gb.placeholder("float32", [None, 6, 6, 4], name="x")
        f = gb.constant(np.random.default_rng(0).standard_normal((3, 3, 4, 1)).astype(np.float32), name="f")
        gb.depthwise_conv2d(x, f, padding="SAME", name="y")
    return g.as_graph_def()


def _run_python(code: str, **env: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                            timeout=300, env={**_base_env(), **env})
    assert result.returncode == 0, result.stderr
    return result.stdout


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}


def test_use_compiled_only_for_numpy_float32_when_asked():
    assert jit.use_compiled(np, True, np.float32, np.dtype("float32")) is jit.AVAILABLE
    assert not jit.use_compiled(np, False, np.float32)
    assert not jit.use_compiled(np, True, np.float32, np.float64)
    assert not jit.use_compiled(object(), True, np.float32)  # cupy, or any other array module


def test_every_compiled_function_is_declared_with_signatures_and_the_ops_that_call_it():
    import kernels

    assert jit.registered(), "no compiled functions registered"
    for function in jit.registered():
        assert function.signatures, function.name
        assert function.ops, function.name
        for op in function.ops:
            kdef = kernels.lookup(op, "cpu")
            assert "compiled" in kdef.context_params, f"{op}'s kernel does not take `compiled` ({function.name})"


@needs_numba
def test_compiled_and_twin_plans_agree():
    graph = _depthwise_graph()
    x = np.random.default_rng(1).standard_normal((2, 6, 6, 4)).astype(np.float32)
    outs = []
    for compiled in (True, False):
        options = engine.SessionOptions(plan=engine.PlanOptions(compiled_kernels=compiled))
        outs.append(engine.Session(graph, options=options).run("y:0", {"x:0": x}))
    np.testing.assert_array_equal(*outs)


@needs_numba
def test_compilation_happens_when_the_plan_is_built_and_lands_in_the_cache_dir(tmp_path):
    """In a fresh process: nothing is compiled by importing the engine or by a plan without compiled
    kernels; building a plan compiles the loops its ops' kernels call (into the configured cache) and no
    others, so the first run compiles nothing; a second process loads them from that cache."""
    code = f"""
        import numpy as np, engine
        from kernels import jit
        from tests.kernels.test_jit import _depthwise_graph
        jit.configure(cache_dir={str(tmp_path)!r})
        assert not any(f._dispatcher for f in jit.registered())
        twin = engine.SessionOptions(plan=engine.PlanOptions(compiled_kernels=False))
        engine.Session(_depthwise_graph(), options=twin).plan_for(["x:0"], ["y:0"])
        assert not any(f._dispatcher for f in jit.registered()), "a twin plan compiled something"
        sess = engine.Session(_depthwise_graph())
        sess.plan_for(["x:0"], ["y:0"])
        used = [f for f in jit.registered() if "DepthwiseConv2dNative" in f.ops]
        assert used and all(f._dispatcher for f in used), "the plan did not compile its loops"
        assert not any(f._dispatcher for f in jit.registered() if f not in used), "it compiled others' loops"
        before = {{f.name: f._dispatcher.stats.cache_misses.copy() for f in used}}
        sess.run("y:0", {{"x:0": np.ones((1, 6, 6, 4), np.float32)}})
        after = {{f.name: f._dispatcher.stats.cache_misses for f in used}}
        assert before == after, "a run compiled something"
        print(len(used), sum(sum(f._dispatcher.stats.cache_hits.values()) for f in used))
    """
    _run_python(code)
    assert list(tmp_path.rglob("*.nbi")), "nothing was written to the kernel cache directory"
    used, hits = map(int, _run_python(code).strip().splitlines()[-1].split())
    assert hits >= used, "the second process did not load its kernels from the cache"


@needs_numba
def test_a_first_start_answers_with_twins_while_missing_loops_compile_in_the_background(tmp_path):
    """In a fresh process with an empty cache: a plan built with compile_in_background returns before its
    loops are compiled, runs (twins) with the same results, and turns to the compiled loops once the
    background thread is done; a second process finds them cached and has them ready at once."""
    code = f"""
        import numpy as np, engine
        from kernels import jit
        from tests.kernels.test_jit import _depthwise_graph
        jit.configure(cache_dir={str(tmp_path)!r})
        options = engine.SessionOptions(plan=engine.PlanOptions(compile_in_background=True))
        sess = engine.Session(_depthwise_graph(), options=options)
        plan = sess.plan_for(["x:0"], ["y:0"])
        used = [f for f in jit.registered() if "DepthwiseConv2dNative" in f.ops]
        x = np.random.default_rng(0).standard_normal((2, 6, 6, 4)).astype(np.float32)
        first = sess.run("y:0", {{"x:0": x}})
        readiness = jit.Readiness(used)
        print("ready-at-build", all(f.ready for f in used))
        assert readiness.wait(240), "the background compilation never finished"
        assert all(f._dispatcher for f in used)
        calls = []
        real_call = jit.CompiledFunction.__call__
        jit.CompiledFunction.__call__ = lambda self, *args: (calls.append(self.name), real_call(self, *args))[1]
        second = sess.run("y:0", {{"x:0": x}})
        assert calls, "the compiled loops were not used once ready"
        twin = engine.Session(_depthwise_graph(), options=engine.SessionOptions(
            plan=engine.PlanOptions(compiled_kernels=False))).run("y:0", {{"x:0": x}})
        np.testing.assert_allclose(first, twin, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(second, twin, rtol=1e-5, atol=1e-5)
    """
    assert "ready-at-build False" in _run_python(code)
    assert "ready-at-build True" in _run_python(code)  # now cached: loaded while the plan is built


def test_settings_reach_the_engine(monkeypatch, tmp_path):
    options = Settings().session_options()
    assert options.plan.compiled_kernels is True and options.tune_allocator is True
    assert options.single_threaded_blas is True and options.plan.compile_in_background is True
    monkeypatch.setenv("TENSORGATE_COMPILE_KERNELS_IN_BACKGROUND", "false")
    assert Settings().session_options().plan.compile_in_background is False
    monkeypatch.setenv("TENSORGATE_COMPILED_KERNELS", "false")
    monkeypatch.setenv("TENSORGATE_TUNE_ALLOCATOR", "false")
    monkeypatch.setenv("TENSORGATE_KERNEL_CACHE_DIR", str(tmp_path / "k"))
    settings = Settings()
    assert settings.session_options().plan.compiled_kernels is False
    assert settings.session_options().tune_allocator is False
    assert settings.kernel_cache_dir == tmp_path / "k"


@needs_numba
def test_preload_cached_loads_what_the_cache_holds_and_compiles_nothing_else(tmp_path):
    """A lazily loading server preloads cached kernels at start: in a fresh process over a cache holding the
    depthwise loops, they are ready after the preload, and no function missing from the cache was compiled."""
    fill = f"""
        import engine
        from kernels import jit
        from tests.kernels.test_jit import _depthwise_graph
        jit.configure(cache_dir={str(tmp_path)!r})
        engine.Session(_depthwise_graph()).plan_for(["x:0"], ["y:0"])
    """
    _run_python(fill)
    check = f"""
        from kernels import jit
        import engine  # registers every kernel's compiled functions
        jit.configure(cache_dir={str(tmp_path)!r})
        jit.preload_cached().join(120)
        used = [f for f in jit.registered() if "DepthwiseConv2dNative" in f.ops]
        assert used and all(f.ready for f in used), "the cached loops were not loaded"
        assert all(f.compile_seconds < 5 for f in jit.registered() if f.ready)
        print(sum(f.ready for f in jit.registered()), len(used))
    """
    ready, used = map(int, _run_python(check).strip().splitlines()[-1].split())
    assert ready == used, "the preload compiled functions the cache did not hold"

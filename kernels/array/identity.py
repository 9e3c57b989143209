"""Kernels of the ops that move tensors without computing: constants, placeholders and identities.

The planner turns Const into a preset slot and aliases the identity family away, so these bodies run
only when such a node is evaluated directly (constant folding, or a fed PlaceholderWithDefault's
default being fetched on its own).
"""

from __future__ import annotations

from kernels.registry import kernel

# Ops the planner never turns into instructions: their output is their (first) input. DeepCopy may alias
# too, since no kernel writes into its inputs; RefIdentity is the Identity of TF1 reference-typed graphs.
IDENTITY_OPS = frozenset({"Identity", "StopGradient", "Snapshot", "PreventGradient", "PlaceholderWithDefault",
                          "DeepCopy", "GuaranteeConst", "RefIdentity"})


@kernel("Const")
def const(xp, *, value, dtype=None):
    """A constant's value, moved to the device's array module."""
    return (xp.asarray(value),)


@kernel("Placeholder", "PlaceholderV2")
def placeholder(xp, *, dtype, shape=None):
    """Placeholders are always fed; the planner raises UnfedPlaceholderError before this could run."""
    raise RuntimeError("placeholder was not fed")


@kernel(*sorted(IDENTITY_OPS))
def identity(xp, x):
    return (x,)


@kernel("IdentityN", outputs=lambda attrs: len(attrs.get("T") or ()))
def identity_n(xp, *xs):
    return tuple(xs)


@kernel("NoOp", outputs=0)
def no_op(xp):
    return ()


# Host only: the check reads the condition back anyway, and the data it shows may be strings.
@kernel("Assert", devices=("cpu",), outputs=0, stateful=True)
def assert_(xp, condition, *data, summarize: int = 3):
    """Raise when `condition` is false, showing the first `summarize` values of each data tensor."""
    if bool(xp.all(condition)):
        return ()
    shown = []
    for d in data:
        flat = d.reshape(-1)[:summarize].tolist()
        flat = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in flat]
        shown.append(str(flat[0]) if d.ndim == 0 else f"{flat}{'...' if d.size > summarize else ''}")
    raise ValueError("assertion failed: [" + "] [".join(shown) + "]")

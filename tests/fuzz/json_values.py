"""Hypothesis strategies for JSON documents shaped like the protocols' request bodies: the right keys
with values of every JSON type, boundary numbers and nesting, so the codecs' checks are all reached."""

from __future__ import annotations

import json

from hypothesis import strategies as st

__all__ = ["json_bytes", "json_values", "numbers", "shapes"]

numbers = (st.integers(-3, 3) | st.sampled_from([2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30])
           | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.5, 1e39, -1e309, 65504.0, 3.4e38]))
_leaves = st.none() | st.booleans() | numbers | st.text(max_size=6) | st.sampled_from(["\ud800", "AAAA", "=="])
json_values = st.recursive(_leaves, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.sampled_from(["b64", "name", "x", "values", ""]) | st.text(max_size=4),
                                             inner, max_size=3), max_leaves=24)
shapes = (st.lists(st.integers(-1, 4) | st.sampled_from([0, 2**31, 2**62, 2**63 - 1, 2**63, 2**64]), max_size=4)
          | json_values)


def json_bytes(doc: object) -> bytes:
    """`doc` as JSON text (bare NaN and Infinity, unpaired surrogates as escapes), as clients send it."""
    return json.dumps(doc).encode("utf-8")

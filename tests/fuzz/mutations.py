"""Byte-level mutations of real inputs, as a hypothesis strategy (shrinkable: every choice is drawn).

A mutated input is a seed (a fixture file TensorFlow wrote) with a few edits applied: bit flips, bytes
set to boundary values, truncations, deleted, inserted or duplicated ranges, a splice with another
seed, and length-field edits (a varint or a fixed-width integer overwritten with a huge value), which
is how a corrupt file claims 2**60 bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from hypothesis import strategies as st

from tests.kernels.example_protos import varint  # re-exported: the fuzz tests' wire-format helpers use it

__all__ = ["mutated", "varint"]

# Lengths a hostile input claims: around 2**31, 2**32, 2**60, 2**63 and 2**64.
_HUGE = (0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 32, 1 << 60, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)
_BOUNDARY_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)




def _position(draw, data: bytearray, end_ok: bool = False) -> int:
    return draw(st.integers(0, max(len(data) - (0 if end_ok else 1), 0)))


def _flip_bit(draw, data: bytearray, seeds: Sequence[bytes]) -> bytearray:
    if data:
        data[_position(draw, data)] ^= 1 << draw(st.integers(0, 7))
    return data


def _set_byte(draw, data: bytearray, seeds: Sequence[bytes]) -> bytearray:
    if data:
        data[_position(draw, data)] = draw(st.sampled_from(_BOUNDARY_BYTES) | st.integers(0, 255))
    return data


def _truncate(draw, data: bytearray, seeds: Sequence[bytes]) -> bytearray:
    return data[: _position(draw, data, end_ok=True)]


def _delete_range(draw, data: bytearray, seeds: Sequence[bytes]) -> bytearray:
    start = _position(draw, data, end_ok=True)
    del data[start : start + draw(st.integers(1, 64))]
    return data


def _insert_bytes(draw, data: bytearray, seeds: Sequence[bytes]) -> bytearray:
    start = _position(draw, data, end_ok=True)
    data[start:start] = draw(st.binary(min_size=1, max_size=16))
    return data


def _duplicate_range(draw, data: bytearray, seeds: Sequence[bytes]) -> bytearray:
    if data:
        start = _position(draw, data)
        piece = data[start : start + draw(st.integers(1, 256))]
        where = _position(draw, data, end_ok=True)
        data[where:where] = piece
    return data


def _splice(draw, data: bytearray, seeds: Sequence[bytes]) -> bytearray:
    other = draw(st.sampled_from(seeds))
    return data[: _position(draw, data, end_ok=True)] + other[draw(st.integers(0, max(len(other) - 1, 0))) :]


def _huge_varint(draw, data: bytearray, seeds: Sequence[bytes]) -> bytearray:
    start = _position(draw, data, end_ok=True)
    old = draw(st.integers(1, 10))  # the bytes the edited length field took
    data[start : start + old] = varint(draw(st.sampled_from(_HUGE)))
    return data


def _huge_fixed(draw, data: bytearray, seeds: Sequence[bytes]) -> bytearray:
    start = _position(draw, data, end_ok=True)
    width = draw(st.sampled_from((4, 8)))
    value = draw(st.sampled_from(_HUGE)) & ((1 << (8 * width)) - 1)
    data[start : start + width] = value.to_bytes(width, "little")
    return data


def _small_fixed(draw, data: bytearray, seeds: Sequence[bytes]) -> bytearray:
    start = _position(draw, data, end_ok=True)
    data[start : start + 4] = struct.pack("<i", draw(st.integers(-2, 1 << 16)))
    return data


_MUTATIONS = (_flip_bit, _set_byte, _truncate, _delete_range, _insert_bytes, _duplicate_range, _splice,
              _huge_varint, _huge_fixed, _small_fixed)


@st.composite
def mutated(draw, seeds: Sequence[bytes], max_edits: int = 4) -> bytes:
    """One of `seeds` with 1 to `max_edits` random edits."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, max_edits))):
        data = draw(st.sampled_from(_MUTATIONS))(draw, data, seeds)
    return bytes(data)

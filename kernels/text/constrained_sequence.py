"""The kernel of TF Text's ConstrainedSequence (text.viterbi_constrained_sequence and
text.greedy_constrained_sequence): the best state per step of each sequence of scores, under allowed transitions
and transition weights, by Viterbi decoding or greedily step by step.

As constrained_sequence.cc computes it, arithmetic included: scores and weights are float32, each candidate is
computed in float32 from the double-held running scores, and in exp space (use_log_space False) the running
scores are divided by their maximum after each step (kept in double). Ties go to the highest state index (each
comparison is >=). With use_start_and_end_states the matrices have one more row and column, the START/END
state. A sequence with no allowed path gets -1 at every step.

Scores are [steps, states] (one sequence) or [batch, steps, states]; `sequence_lengths` gives each sequence's
length. Empty `allowed_transitions` or `transition_weights` mean "all allowed" and "no weights".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.registry import kernel

__all__ = ["constrained_sequence"]

F32 = np.float32
LOWEST = float(np.finfo(np.float32).min)
ERROR = -1


def _validate(tensor: np.ndarray, num_states: int, start_end: bool, name: str) -> None:
    if tensor.ndim != 2:
        raise ValueError(f"{name} must be of rank 2")
    expected = num_states + 1 if start_end else num_states
    for axis, word in ((0, "zeroth"), (1, "first")):
        if tensor.shape[axis] != expected:
            raise ValueError(f"{name} must have a {word} dimension of size {expected} when num_states is "
                             f"{num_states} and use_start_and_end_states is {int(start_end)}")


def _combine(score: np.float32, other: float, log_space: bool) -> np.float32:
    """float current_score += / *= other (a double or a float), stored back as float."""
    return F32(float(score) + float(other)) if log_space else F32(float(score) * float(other))


def _viterbi(scores: np.ndarray, tw: np.ndarray | None, allowed: np.ndarray | None, log_space: bool,
             start_end: bool) -> list[int]:
    steps, n = scores.shape
    if steps == 0:
        return []
    end = n
    backpointers = [[ERROR] * n for _ in range(steps)]
    current = [LOWEST] * n
    for state in range(n):
        if start_end:
            if allowed is not None and not allowed[end, state]:
                continue
            score = scores[0, state]
            if tw is not None:
                score = _combine(score, tw[end, state], log_space)
        else:
            score = scores[0, state]
        backpointers[0][state] = end
        current[state] = float(score)
    if not log_space:
        top = max(current)
        if top > 0:
            current = [s / top for s in current]
    previous = current
    for step in range(1, steps):
        current = [LOWEST] * n
        for state in range(n):
            best_source, best = ERROR, F32(LOWEST)
            for source in range(n):
                if backpointers[step - 1][source] == ERROR:
                    continue
                if allowed is not None and not allowed[source, state]:
                    continue
                score = _combine(scores[step, state], previous[source], log_space)
                if tw is not None:
                    score = _combine(score, tw[source, state], log_space)
                if score >= best:
                    best_source, best = source, score
            backpointers[step][state] = best_source
            current[state] = float(best)
        if not log_space:
            top = max(current)
            if top > 0:
                current = [s / top for s in current]
        previous = current
    best_source, final = ERROR, F32(LOWEST)
    for source in range(n):
        if backpointers[steps - 1][source] == ERROR:
            continue
        if allowed is not None and start_end and not allowed[source, end]:
            continue
        score = F32(previous[source])
        if start_end and tw is not None:
            score = _combine(score, tw[source, end], log_space)
        if score >= final:
            best_source, final = source, score
    if best_source == ERROR:
        return [ERROR] * steps
    path = [0] * steps
    state = best_source
    for step in range(steps - 1, -1, -1):
        path[step] = state
        state = backpointers[step][state]
    return path


def _greedy(scores: np.ndarray, tw: np.ndarray | None, allowed: np.ndarray | None, log_space: bool,
            start_end: bool) -> list[int]:
    steps, n = scores.shape
    end = n
    path: list[int] = []
    for step in range(steps):
        final_step = step == steps - 1 and start_end
        previous = end if step == 0 else path[-1]
        if previous == ERROR:
            path.append(ERROR)
            continue
        best_state, best = ERROR, F32(LOWEST)
        for state in range(n):
            score = scores[step, state]
            if start_end or step > 0:
                if allowed is not None and (not allowed[previous, state] or (final_step and not allowed[state, end])):
                    continue
                if tw is not None:
                    score = _combine(score, tw[previous, state], log_space)
                    if final_step:
                        score = _combine(score, tw[state, end], log_space)
            if score >= best:
                best_state, best = state, score
        path.append(best_state)
    return path


@kernel("ConstrainedSequence", devices=("cpu",), outputs=2)
def constrained_sequence(xp: Any, scores: Any, sequence_lengths: Any, allowed_transitions: Any,
                         transition_weights: Any, *, use_viterbi: bool, use_log_space: bool,
                         use_start_and_end_states: bool, Tsplits: Any = np.int64) -> tuple:
    """The states of every sequence, flat (int32), and their row splits (Tsplits)."""
    scores = np.asarray(scores, np.float32)
    if scores.ndim not in (2, 3):
        raise ValueError("The score tensor must be of rank 2 or 3.")
    batched = scores if scores.ndim == 3 else scores[None]
    lengths = np.asarray(sequence_lengths).reshape(-1).astype(np.int64).tolist()
    batch, num_steps, n = batched.shape
    if len(lengths) != batch:
        raise ValueError(f"There should be exactly one length for every batch element. Found {len(lengths)} length "
                         f"elements for a batch size of {batch}")
    if max(lengths, default=0) > num_steps:
        raise ValueError("The scores tensor is too short for the longest sequence length.")
    if min(lengths, default=0) < 0:
        raise ValueError(f"sequence_lengths must not be negative; they are {lengths}")
    allowed = np.asarray(allowed_transitions, bool)
    tw = np.asarray(transition_weights, np.float32)
    allowed = allowed if allowed.size else None
    tw = tw if tw.size else None
    if allowed is not None:
        _validate(allowed, n, use_start_and_end_states, "allowed_transitions")
    if tw is not None:
        _validate(tw, n, use_start_and_end_states, "transition_weights")
        if not use_log_space and np.any(~(tw >= 0)):
            raise ValueError("The transition weights tensor must not contain negative values.")
    decode = _viterbi if use_viterbi else _greedy
    states: list[int] = []
    for b, length in enumerate(lengths):
        states += decode(batched[b, :length], tw, allowed, use_log_space, use_start_and_end_states)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.dtype(Tsplits))
    return np.array(states, np.int32), splits

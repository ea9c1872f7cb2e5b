"""The float64 twin run at the edges of its own rounding: how far float64 round-off can
move a loss's coefficients (THEORY.md section 4: "float64 itself rounds"; the float64
floor of :func:`exchange.checker.float64_floor.floored`).

The standard model of floating-point arithmetic: an operation returns its exact result
rounded, within ``u = 2^-53`` of it relatively. The same loss computed in another order
(the rows of a group summed in another order: the permutation property's variant)
rounds each operation again: its result lies within ``u`` of the exact one, so within
``eps = 2u = 2^-52`` (:data:`~exchange.checker.tolerances.RESOLUTION`) of the one this
run computed, relative to the magnitudes it was computed from. :func:`directed_twin`
runs the float64 twin with every floating result moved by that much in one direction
(``direction`` +1, then -1: Kahan's test of recomputing with the rounding directed up
and down): ``z + direction eps m``, where ``m`` is

- for an addition, a subtraction or a sum (``a + b``, ``a - b``, ``sum``, ``mean``,
  ``index_add``, ``matmul``, ...): the same operation on the magnitudes of its operands
  (``|a| + |b|``, ``sum |x|``), the size a cancelled result's rounding has: a one-pass
  variance ``E[x^2] - E[x]^2`` of tied values, 0 or ``-u x^2`` in this order, is moved to
  ``+eps x^2`` in one of the two runs, and a square root after it gives ``sqrt(eps) |x|``
  there, as another row order does in the real computation;
- for any other operation, ``|z|``.

An integer result (below 2^53) of integer magnitudes (a length, a count, a mask) is
exact in float64 and is not moved; nor are in-place results and views (the inputs'
storage). Operations that are exact in real arithmetic (a copy, an index, a clamp) are
moved too: the measurement can only overstate float64's round-off, by a few units. The
coefficients' difference to the plain twin's is float64 round-off at float64's own unit,
through the loss's own arithmetic: no law between precisions (linear, square root) is
assumed, and no sample of a lower precision's roundings is needed. Where the moved results
decide something (a mask, a clip, a selection), a run may decide otherwise, by a jump that
does not grow with the rounding: :func:`exchange.checker.float64_floor.float64_rounding` takes
the step from one rounding to two, which keeps the round-off and cancels such a jump.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from exchange.checker.tolerances import RESOLUTION
from exchange.checker.twin import Float64Twin

__all__ = ["directed_twin", "DIRECTIONS", "ROUNDINGS_STEP"]

# the two directions: every result moved up, then every result moved down
DIRECTIONS = (1.0, -1.0)
# the floor's step: every result moved by one rounding, then by two (a round-off grows with
# it, a decision it flipped does not: exchange.checker.float64_floor.float64_rounding)
ROUNDINGS_STEP = (1.0, 2.0)
# operations whose result is a sum of (signed) terms: their rounding scales with the terms'
# magnitudes, the same operation on |operands|; the subtractions take the second with a minus
_SUMS = frozenset({"add", "__add__", "__radd__", "sum", "nansum", "mean", "nanmean", "index_add", "scatter_add",
                   "cumsum", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "mv", "dot", "einsum"})
_DIFFERENCES = frozenset({"sub", "subtract", "__sub__", "__rsub__", "rsub"})


def _magnitudes(func, name: str, args, kwargs) -> torch.Tensor:
    """The operation on the magnitudes of its floating operands (a subtraction's second
    operand negated, so that the result is ``|a| + |b|``)."""
    mags = [a.abs() if isinstance(a, torch.Tensor) and a.is_floating_point() else
            abs(a) if isinstance(a, float) else a for a in args]
    if name in _DIFFERENCES and len(mags) > 1:
        mags[1] = -mags[1]
    return func(*mags, **kwargs).abs()


class _Directed(TorchFunctionMode):
    def __init__(self, direction: float) -> None:
        super().__init__()
        self.step = direction * RESOLUTION["float64"]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not (isinstance(out, torch.Tensor) and out.dtype is torch.float64 and out._base is None
                and out.numel() and not any(out is a for a in args)):
            return out
        name = getattr(func, "__name__", "")
        z = out.detach()
        m = _magnitudes(func, name, args, kwargs).detach() if name in _SUMS | _DIFFERENCES else z.abs()
        exact = (z == torch.round(z)) & (m == torch.round(m))  # integers below 2^53 are exact in float64
        return out + torch.where(exact, 0.0, self.step * m)


class _DirectedTwin(Float64Twin):
    def __init__(self, loss_fn, direction: float) -> None:
        super().__init__(loss_fn)
        self.direction = direction

    def __call__(self, logprobs: torch.Tensor, rollout):
        with _Directed(self.direction):
            return super().__call__(logprobs, rollout)


def directed_twin(loss_fn, direction: float) -> Float64Twin:
    """The float64 twin of ``loss_fn`` with every operation's result moved by ``|direction|``
    roundings of its magnitudes, up for a positive ``direction``, down for a negative one
    (:data:`DIRECTIONS` times :data:`ROUNDINGS_STEP`)."""
    inner = loss_fn.loss_fn if isinstance(loss_fn, Float64Twin) else loss_fn
    return _DirectedTwin(inner, direction)

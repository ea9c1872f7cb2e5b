"""The float64 twin of a loss (THEORY.md section 4, precision rule: "the float64 twin is
the reference").

:func:`float64_twin` runs the user's ``loss_fn`` under a
:class:`torch.overrides.TorchFunctionMode` (float64 default dtype, autocast off) that
rewrites every request for a lower floating dtype to float64: ``dtype=`` keyword
arguments, ``Tensor.to(dtype)``, ``.float()``, ``.half()``, ``.bfloat16()``,
``.type(...)``, ``type_as``/``.to(other)`` of a low-precision tensor, and tensors built from
Python lists (the default dtype). The result is a plain ``loss_fn`` (the
:class:`~exchange.core.coefficients.Engine`, the bulk fuzzer and
``torch.func.vmap(grad(...))`` see nothing else).

The twin is incomplete when a low-precision floating tensor still reaches an op inside
the mode (``torch.from_numpy`` of a float32 array, a custom kernel's output): the twin
then records the first such op (:attr:`Float64Twin.incomplete`), and the checker judges
the loss itself at its detected precision instead (:mod:`exchange.checker.checking`).

:func:`at_precision_twin` is the same transform towards float32: every floating request
(float64 included) and every input in float32, the "float32 twin" whose difference to the
float64 twin measures the loss's conditioning on an input (the float64 floor,
:mod:`exchange.checker.precision`).
"""

from __future__ import annotations

import contextlib
import torch
from torch.overrides import TorchFunctionMode

from exchange.core.rollout import Rollout

__all__ = ["Float64Twin", "float64_twin", "float32_twin", "LOW_DTYPES", "dtype_name"]

# Floating dtypes below float64 (what the twin rewrites and what an incomplete twin shows).
LOW_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_LOW = frozenset(LOW_DTYPES)
_NAMES = {torch.float64: "float64", torch.float32: "float32", torch.bfloat16: "bf16", torch.float16: "float16"}
_COARSENESS = ("", "float64", "float32", "float16", "bf16")  # an incomplete twin names the coarsest dtype that reached an op
# ``Tensor.type`` strings of low-precision floating types
_TYPE_STRINGS = {f"torch.{cuda}{kind}Tensor": dtype for cuda in ("", "cuda.")
                 for kind, dtype in (("Double", torch.float64), ("Float", torch.float32), ("Half", torch.float16),
                                        ("BFloat16", torch.bfloat16))}
# the casting methods and the dtype each requests
_CASTS = {torch.Tensor.float: torch.float32, torch.Tensor.half: torch.float16, torch.Tensor.bfloat16: torch.bfloat16,
          torch.Tensor.double: torch.float64}
_CONVERSIONS = {torch.Tensor.to, torch.Tensor.type, torch.Tensor.type_as}
_TENSOR = torch.Tensor
_SPECIAL = frozenset(_CASTS) | _CONVERSIONS  # the ops that request a dtype without a dtype= keyword


def dtype_name(dtype: torch.dtype) -> str:
    """The precision name of a floating dtype (``"bf16"`` for bfloat16)."""
    return _NAMES.get(dtype, str(dtype).replace("torch.", ""))


class _Rewrite(TorchFunctionMode):
    """Every floating dtype request becomes ``target``; low-precision tensors reaching an op
    are recorded in ``seen`` (the coarsest first) with the op's name."""

    def __init__(self, target: torch.dtype, record) -> None:
        super().__init__()
        self.target = target
        self.record = record
        # only the float64 twin can be incomplete (the float32 twin casts its inputs itself)
        self.scan = target is torch.float64

    def _floating(self, dtype) -> bool:
        return isinstance(dtype, torch.dtype) and dtype.is_floating_point and not dtype.is_complex

    def _fix(self, value):
        if self._floating(value) and value != self.target:
            self.record.rewrote(value)
            return self.target
        if isinstance(value, type) and value.__name__.endswith("Tensor") and value is not torch.Tensor:
            value = f"{value.__module__}.{value.__name__}"  # the class torch.FloatTensor, as its name
        if isinstance(value, str) and _TYPE_STRINGS.get(value, self.target) != self.target:
            self.record.rewrote(_TYPE_STRINGS[value])
            return self.target
        return value

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # the hot path (every op of the loss): an op that is no cast or conversion and has
        # no dtype= (most ops) requests no dtype, so there is nothing to rewrite; it is only
        # scanned for low-precision inputs (the same scan as every other op)
        if func in _SPECIAL or (kwargs and "dtype" in kwargs):
            return self._requested(func, args, kwargs)
        if self.scan:  # the scan of _scan, inlined: the hot path
            for a in args:
                cls = a.__class__
                if cls is _TENSOR:
                    if a.dtype in _LOW:
                        self.record.reached(a.dtype, getattr(func, "__name__", str(func)))
                elif cls is not float and cls is not int:
                    self._scan(func, (a,))
        return func(*args, **kwargs) if kwargs else func(*args)

    def _scan(self, func, args) -> None:
        """Record a low-precision floating tensor among ``args`` (or in a list or tuple of
        them: ``torch.cat``, ``torch.stack``)."""
        for a in args:
            if getattr(a, "dtype", None) in _LOW:
                self.record.reached(a.dtype, getattr(func, "__name__", str(func)))
            elif a.__class__ is list or a.__class__ is tuple:
                for x in a:
                    if getattr(x, "dtype", None) in _LOW:
                        self.record.reached(x.dtype, getattr(func, "__name__", str(func)))

    def _requested(self, func, args, kwargs):
        """An op that may request a dtype: the request rewritten to ``target``."""
        if kwargs and "dtype" in kwargs:
            kwargs = {**kwargs, "dtype": self._fix(kwargs["dtype"])}
        if func in _CASTS:
            if args and isinstance(args[0], torch.Tensor):
                requested = _CASTS[func]
                if requested != self.target:
                    self.record.rewrote(requested)
                return args[0].to(self.target)
        elif func in _CONVERSIONS and len(args) > 1:
            other = args[1]
            if isinstance(other, torch.Tensor):  # .to(other) / .type_as(other): other's dtype, rewritten
                if self._floating(other.dtype):
                    if other.dtype != self.target:
                        self.record.rewrote(other.dtype)
                    return args[0].to(device=other.device, dtype=self.target)
            else:
                args = (args[0], *(self._fix(a) for a in args[1:]))
        if self.scan:
            self._scan(func, args)
        return func(*args, **(kwargs or {}))


class Float64Twin:
    """``loss_fn`` run as its float64 twin; ``twin(logprobs, rollout) -> loss``.

    Attributes (accumulated over every call):
        loss_fn: the user's loss.
        rewritten: the low-precision dtypes the loss requested (names, e.g. ``{"float32"}``);
            empty when the twin computes exactly what the loss computes.
        incomplete: ``""``, or one line naming the first op a low-precision tensor reached
            inside the mode (the twin is then not the loss's float64 version).
        incomplete_precision: the coarsest such dtype's name (``""`` when complete).
    """

    def __init__(self, loss_fn, target: torch.dtype = torch.float64) -> None:
        self.loss_fn = loss_fn
        self.target = target
        self.rewritten: set[str] = set()
        self.incomplete = ""
        self.incomplete_precision = ""
        self.__name__ = getattr(loss_fn, "__name__", type(loss_fn).__name__)

    # ------------------------------------------------------------- records
    def rewrote(self, dtype: torch.dtype) -> None:
        if dtype in LOW_DTYPES:
            self.rewritten.add(dtype_name(dtype))

    def reached(self, dtype: torch.dtype, op: str) -> None:
        if not self.incomplete or _COARSENESS.index(dtype_name(dtype)) > _COARSENESS.index(self.incomplete_precision):
            self.incomplete = f"a {dtype_name(dtype)} tensor reached {op} inside the float64 twin"
            self.incomplete_precision = dtype_name(dtype)

    # ---------------------------------------------------------------- call
    def __call__(self, logprobs: torch.Tensor, rollout: Rollout) -> torch.Tensor:
        with _twin_context(self.target), _Rewrite(self.target, self):
            if self.target is not torch.float64:  # the float32 twin runs on float32 inputs too
                logprobs, rollout = _cast_inputs(logprobs, rollout, self.target)
            loss = self.loss_fn(logprobs, rollout)
        if self.target is not torch.float64 and isinstance(loss, torch.Tensor):
            loss = loss.to(torch.float64)
        return loss


def _cast_inputs(logprobs: torch.Tensor, rollout: Rollout, dtype: torch.dtype):
    """``logprobs`` and every floating field of ``rollout`` in ``dtype`` (the float32 twin)."""
    fields = {name: getattr(rollout, name).to(dtype) for name in
              ("rewards", "old_logprobs", "ref_logprobs", "entropy", "baseline_rewards", "sampling_logprobs")
              if getattr(rollout, name, None) is not None and getattr(rollout, name).is_floating_point()}
    return logprobs.to(dtype), rollout.with_fields(fields)


@contextlib.contextmanager
def _twin_context(dtype: torch.dtype):
    """``dtype`` as the default (tensors built from Python lists), autocast off."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with contextlib.ExitStack() as stack:
            for device in ("cpu", "cuda"):  # an autocast the caller entered (one the loss enters shows as
                if torch.is_autocast_enabled(device):  # low-precision tensors reaching ops: incomplete)
                    stack.enter_context(torch.autocast(device_type=device, enabled=False))
            yield
    finally:
        torch.set_default_dtype(previous)


def float64_twin(loss_fn) -> Float64Twin:
    """The float64 twin of ``loss_fn`` (a :class:`Float64Twin`, itself a ``loss_fn``)."""
    return loss_fn if isinstance(loss_fn, Float64Twin) and loss_fn.target is torch.float64 else Float64Twin(loss_fn)


def float32_twin(loss_fn) -> Float64Twin:
    """``loss_fn`` with every floating request and input in float32: the same code at a
    known coarser precision (its difference to the float64 twin, scaled by the ratio of
    unit round-offs, is the float64 floor)."""
    inner = loss_fn.loss_fn if isinstance(loss_fn, Float64Twin) else loss_fn
    return Float64Twin(inner, target=torch.float32)

"""``Rollout``: one batch of sampled responses, grouped by prompt (THEORY.md section 1).

Construction validates every field and raises :class:`~exchange.errors.RolloutError`
naming the field, the value found and the fix. Objectives read the fields and use the
group helpers (``group_mean``, ``group_std``, ``lengths`` ...) to stay short.

Shapes: ``N`` responses, ``T`` padded length, ``P`` padded prompt length.

Multi-turn rows: ``mask`` marks the policy's own tokens. A row's tokens run up to its
last masked-in token (:attr:`Rollout.spans`); a False inside that span is a context
token the policy did not choose (a tool's output in an agent loop, verl's
``response_mask`` = 0 there): no event and no coefficient, but part of the prefix of
every later token (THEORY.md section 1: an event is ``(group, o_i[<t], o_i[t])``, and
``o_i[<t]`` is everything the policy conditioned on). Right-padded masks are the case
without holes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
from torch import Tensor

from exchange.errors import RolloutError

__all__ = ["Rollout", "FIELD_DTYPES", "LOGPROB_SLACK"]

# A log-probability may exceed 0 only by float round-off.
LOGPROB_SLACK = 1e-6


@dataclass(frozen=True, eq=False)
class Rollout:
    """One batch of responses. All tensors share the first dimension ``N``.

    Fields:
        tokens: ``LongTensor[N, T]`` response token ids, right-padded; context tokens
            inside a response (a tool's output) keep their ids: they are part of the
            prefix of the tokens after them.
        mask: ``BoolTensor[N, T]`` True on the policy's tokens. Padding follows each
            row's last True; a False before it is a context token (a multi-turn
            rollout's tool output): not an event, coefficient 0 (see the module
            docstring). Every row needs at least one True.
        rewards: ``Tensor[N]`` scalar reward of each response.
        group: ``LongTensor[N]`` prompt index of each response; equal index = same prompt.
            Groups need not be contiguous; every group needs at least 2 responses.
        old_logprobs: ``Tensor[N, T]`` behaviour-policy log-probs (constants).
        ref_logprobs: ``Tensor[N, T] | None`` reference-policy log-probs, for KL terms.
        entropy: ``Tensor[N, T] | None`` current-policy token entropies (constants);
            identical events carry identical values.
        logprobs: ``Tensor[N, T] | None`` the current-policy log-probs this rollout was
            evaluated at. Optional; the checker's generators fill it so a counterexample
            reproduces with ``token_coefficients(fn, r.logprobs, r)``.
        baseline_rewards: ``Tensor[N] | None`` a per-response baseline reward (ReMax's
            greedy-response reward).
        advantages: ``Tensor[N] | Tensor[N, T] | None`` precomputed advantages (per
            response or per token), e.g. verl's, which hands a policy loss advantages and
            no group ids. Every catalog objective with an estimator then uses them as
            given, in place of its own (no re-centring, no std scaling; what the objective
            does on top of its estimator, e.g. HAPO's entropy shift, still applies), and
            groups may be partial or single rows, since the baseline was taken elsewhere.
        truncated: ``BoolTensor[N] | None`` True where the response hit the length limit.
            A truncated response keeps its tokens: it is data (it counts in its group's
            advantages). An objective bound with ``mask_truncated=True`` (TRL's
            ``mask_truncated_completions``) drops its tokens from the loss *after* the
            group's advantages were centred over all responses, and its normaliser counts
            only the tokens it keeps (THEORY.md sections 2 and 4: a mask after centring,
            M4 when a group mixes truncated and complete responses).
        prompt_tokens: ``LongTensor[N, P] | None`` prompt ids, left-padded, so a model can
            recompute log-probs; ``prompt_mask`` ``BoolTensor[N, P]`` marks real tokens.
        sampling_logprobs: ``Tensor[N, T] | None`` the log-probs the *sampler* reported for
            the tokens when it is not the trainer's policy (vLLM's, TRL's
            ``sampling_per_token_logps``): constants, a function of the event like
            ``old_logprobs``. NaN where the sampler could not score a token (vLLM's None),
            the only field that may hold NaN. Read by objectives bound with ``sampler_is``
            (TRL's vLLM importance-sampling correction) or ``off_policy_mask``; ``None``:
            the sampler is the behaviour policy (``old_logprobs``).
    """

    # metadata["kind"]: "integer", "bool" or "float" (FIELD_DTYPES derives from it)
    tokens: Tensor = field(metadata={"kind": "integer"})
    mask: Tensor = field(metadata={"kind": "bool"})
    rewards: Tensor = field(metadata={"kind": "float"})
    group: Tensor = field(metadata={"kind": "integer"})
    old_logprobs: Tensor = field(metadata={"kind": "float"})
    ref_logprobs: Tensor | None = field(default=None, metadata={"kind": "float"})
    entropy: Tensor | None = field(default=None, metadata={"kind": "float"})
    logprobs: Tensor | None = field(default=None, metadata={"kind": "float"})
    baseline_rewards: Tensor | None = field(default=None, metadata={"kind": "float"})
    advantages: Tensor | None = field(default=None, metadata={"kind": "float"})
    truncated: Tensor | None = field(default=None, metadata={"kind": "bool"})
    prompt_tokens: Tensor | None = field(default=None, metadata={"kind": "integer"})
    prompt_mask: Tensor | None = field(default=None, metadata={"kind": "bool"})
    sampling_logprobs: Tensor | None = field(default=None, metadata={"kind": "float"})
    # Derived group structure, computed once at construction.
    _group_index: Tensor = field(init=False, repr=False)  # [N] dense 0..n_groups-1
    _n_groups: int = field(init=False, repr=False)
    _group_sizes: Tensor = field(init=False, repr=False)  # [N] G of each response's group

    def __post_init__(self) -> None:
        _validate(self)
        self._derive_groups()

    def _derive_groups(self) -> None:
        uniq, dense = torch.unique(self.group, return_inverse=True)
        object.__setattr__(self, "_group_index", dense)
        object.__setattr__(self, "_n_groups", int(uniq.numel()))
        # the losses take group means and stds many times per call: count once
        object.__setattr__(self, "_group_sizes", torch.bincount(dense, minlength=int(uniq.numel()))[dense])

    @classmethod
    def _trusted(cls, **fields: Any) -> "Rollout":
        """A Rollout from fields an internal constructor already guarantees valid
        (``exchange.checker.cases.build``), without re-running :func:`_validate`.

        Identical to ``Rollout(**fields)`` for valid fields (tests/core/test_rollout.py
        and tests/checker/test_cases.py compare the two); never for user input.
        """
        r = object.__new__(cls)
        for f in dataclasses.fields(cls):
            if f.init:
                value = fields.pop(f.name, f.default)
                if value is dataclasses.MISSING:
                    raise TypeError(f"Rollout._trusted: missing field {f.name!r}")
                object.__setattr__(r, f.name, value)
        if fields:
            raise TypeError(f"Rollout._trusted: unknown fields {sorted(fields)}")
        r._derive_groups()
        return r

    def with_fields(self, fields: Mapping[str, Tensor] | None = None, *, copy: bool = False) -> "Rollout":
        """A copy that shares this rollout's group structure, with ``fields`` replaced and
        every float field in float64, without validating again: for batches built on this
        rollout's own layout (the checker's configurations, a vmapped loss's per-example
        view). ``copy``: clone every tensor, so a loss that edits a field in place cannot
        change the caller's."""
        fields = fields or {}
        r = object.__new__(type(self))
        for f in dataclasses.fields(self):
            value = fields.get(f.name, getattr(self, f.name))
            if isinstance(value, Tensor):
                if value.is_floating_point():
                    value = value.to(torch.float64)
                if copy:
                    value = value.clone()
            object.__setattr__(r, f.name, value)
        return r

    def dropping(self, rows: Tensor, **fields: Tensor) -> "Rollout":
        """A view whose mask drops the responses where ``rows`` (``BoolTensor[N]``) is
        True, with ``fields`` replaced: the loss mask of an objective that masks after
        centring (``mask_truncated``). Not validated (a dropped row has no token left);
        tokens, values and the group structure are this rollout's. For the loss only:
        compute the advantages on ``self`` first and pass them as ``advantages``."""
        r = object.__new__(type(self))
        for f in dataclasses.fields(self):
            object.__setattr__(r, f.name, fields.get(f.name, getattr(self, f.name)))
        object.__setattr__(r, "mask", self.mask & ~rows.to(self.mask.device)[:, None])
        return r

    # ------------------------------------------------------------------ sizes
    @property
    def n(self) -> int:
        """Number of responses ``N``."""
        return int(self.tokens.shape[0])

    @property
    def n_groups(self) -> int:
        return self._n_groups

    @property
    def group_index(self) -> Tensor:
        """``LongTensor[N]``: the group of each response renumbered 0..n_groups-1 in
        order of the original group ids."""
        return self._group_index

    @property
    def lengths(self) -> Tensor:
        """``LongTensor[N]``: number of real tokens ``L_i`` of each response."""
        return self.mask.sum(dim=1)

    @property
    def spans(self) -> Tensor:
        """``LongTensor[N]``: one past each row's last policy token, the row's extent
        (context tokens inside it included, padding after it excluded). Equal to
        :attr:`lengths` for a right-padded row; larger for a multi-turn row whose mask
        has holes."""
        t = self.mask.shape[1]
        positions = torch.arange(1, t + 1, device=self.mask.device)
        return torch.where(self.mask, positions, torch.zeros_like(positions)).amax(dim=1)

    @property
    def group_sizes(self) -> Tensor:
        """``LongTensor[N]``: ``G`` of each response's group, broadcast per response."""
        return self._group_sizes

    @property
    def n_tokens(self) -> Tensor:
        """Scalar: total number of real tokens in the batch."""
        return self.mask.sum()

    @property
    def fmask(self) -> Tensor:
        """``Tensor[N, T]``: the mask as the float dtype of ``old_logprobs``."""
        return self.mask.to(self.old_logprobs.dtype)

    # ------------------------------------------------------------ group math
    def group_sum(self, x: Tensor) -> Tensor:
        """Per-group sum of ``x: [N]``, broadcast back to ``[N]``."""
        totals = torch.zeros(self.n_groups, dtype=x.dtype, device=x.device).index_add(0, self._group_index, x)
        return totals[self._group_index]

    def group_mean(self, x: Tensor) -> Tensor:
        """Per-group mean of ``x: [N]``, broadcast back to ``[N]``."""
        return self.group_sum(x) / self.group_sizes.to(x.dtype)

    def group_std(self, x: Tensor, unbiased: bool = True) -> Tensor:
        """Per-group standard deviation of ``x: [N]`` (Bessel-corrected by default, as
        ``torch.std`` in TRL/verl/OpenRLHF), broadcast back to ``[N]``."""
        centred = x - self.group_mean(x)
        dof = self.group_sizes.to(x.dtype) - (1.0 if unbiased else 0.0)
        return torch.sqrt(self.group_sum(centred * centred) / dof)

    def group_max(self, x: Tensor) -> Tensor:
        """Per-group maximum of ``x: [N]``, broadcast back to ``[N]``."""
        out = torch.full((self.n_groups,), -torch.inf, dtype=x.dtype, device=x.device)
        out = out.scatter_reduce(0, self._group_index, x, reduce="amax")
        return out[self._group_index]

    def group_min(self, x: Tensor) -> Tensor:
        """Per-group minimum of ``x: [N]``, broadcast back to ``[N]``."""
        return -self.group_max(-x)

    # ------------------------------------------------------------ conversion
    def replace(self, **changes: Any) -> "Rollout":
        """A copy with some fields replaced (validated again)."""
        return dataclasses.replace(self, **changes)

    def to(self, dtype: torch.dtype) -> "Rollout":
        """A copy whose float fields are cast to ``dtype`` (e.g. ``torch.float64``)."""
        changes = {
            name: getattr(self, name).to(dtype)
            for name in _FLOAT_FIELDS
            if getattr(self, name) is not None and getattr(self, name).dtype != dtype
        }
        return self.replace(**changes) if changes else self

    def select(self, rows: Tensor | list[int]) -> "Rollout":
        """The sub-batch of responses ``rows`` (in that order)."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.tokens.device)
        changes = {}
        for f in dataclasses.fields(self):
            if not f.init:
                continue
            value = getattr(self, f.name)
            changes[f.name] = None if value is None else value[idx]
        return Rollout(**changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested lists, for JSON (padding included, ``None`` fields dropped)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.init and value is not None:
                out[f.name] = value.tolist()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Rollout":
        """Inverse of :meth:`to_dict` (each field read back as its :data:`FIELD_DTYPES`)."""
        return cls(**{name: torch.tensor(value, dtype=FIELD_DTYPES.get(name, torch.float64))
                      for name, value in data.items()})

    def to_code(self) -> str:
        """A pasteable constructor call that rebuilds this rollout."""
        from exchange.core.formatting import rollout_code

        return rollout_code(self)

    def __str__(self) -> str:
        from exchange.core.formatting import rollout_table

        return rollout_table(self)

    def __repr__(self) -> str:
        """A pasteable constructor (as Hypothesis prints a falsifying example)."""
        return self.to_code()


_KIND_DTYPES = {"integer": torch.long, "bool": torch.bool, "float": torch.float64}
FIELD_DTYPES: dict[str, torch.dtype] = {
    f.name: _KIND_DTYPES[f.metadata["kind"]] for f in dataclasses.fields(Rollout) if f.init
}
"""Each constructor field of :class:`Rollout` (in declaration order) and the dtype it is
read back as from plain data (:meth:`Rollout.from_dict`, batch files): integer fields as
``torch.long``, boolean ones as ``torch.bool``, float ones as ``torch.float64``. Derived
from the dataclass fields' ``metadata["kind"]``."""
_FLOAT_FIELDS = tuple(name for name, dtype in FIELD_DTYPES.items() if dtype == torch.float64)


# ---------------------------------------------------------------- validation
def _fail(name: str, problem: str, fix: str) -> RolloutError:
    return RolloutError(f"Rollout.{name}: {problem}. {fix}")


def _shape(t: Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _validate(r: Rollout) -> None:
    for f in dataclasses.fields(r):
        if not f.init:
            continue
        value = getattr(r, f.name)
        if value is None:
            if f.default is dataclasses.MISSING:
                raise _fail(f.name, "is None", "This field is required.")
            continue
        if not isinstance(value, Tensor):
            raise _fail(
                f.name,
                f"got {type(value).__name__}, not a torch.Tensor",
                f"Pass torch.tensor(...) for {f.name}.",
            )
    if r.tokens.dim() != 2:
        raise _fail("tokens", f"shape={_shape(r.tokens)} is not 2-D [N, T]", "Stack responses into [N, T], right-padded.")
    n, t = r.tokens.shape
    if n == 0 or t == 0:
        raise _fail("tokens", f"shape={_shape(r.tokens)} is empty", "A rollout needs at least one group of 2 responses with 1 token each.")
    _check_dtype(r.tokens, "tokens", integer=True)

    for name in ("mask", "old_logprobs", "ref_logprobs", "entropy", "logprobs", "sampling_logprobs"):
        value = getattr(r, name)
        if value is not None and tuple(value.shape) != (n, t):
            raise _fail(name, f"shape={_shape(value)} differs from tokens [{n}, {t}]", f"Give {name} the same [N, T] shape as tokens.")
    if r.advantages is not None and tuple(r.advantages.shape) not in ((n,), (n, t)):
        raise _fail("advantages", f"shape={_shape(r.advantages)} is neither [N]=[{n}] nor [N, T]=[{n}, {t}]",
                    "Give one advantage per response, or one per token like tokens.")
    for name in ("rewards", "group", "baseline_rewards", "truncated"):
        value = getattr(r, name)
        if value is not None and tuple(value.shape) != (n,):
            hint = " (one scalar per response; sum token rewards first)" if name == "rewards" else ""
            raise _fail(name, f"shape={_shape(value)} is not [N]=[{n}]", f"Give one value per response{hint}.")

    if r.mask.dtype != torch.bool:
        other = r.mask[(r.mask != 0) & (r.mask != 1)] if not r.mask.is_complex() else r.mask.flatten()
        if other.numel():  # .bool() would read any non-zero as a policy token: say what is there
            raise _fail("mask", f"dtype={r.mask.dtype} holds {other[0].item()}, neither 0 nor 1",
                        "Pass a bool mask, True on the policy's tokens and False on padding and context (tool) tokens.")
        raise _fail("mask", f"dtype={r.mask.dtype} is not torch.bool", "Use mask.bool() (True on the policy's tokens).")
    for name in ("truncated", "prompt_mask"):
        value = getattr(r, name)
        if value is not None and value.dtype != torch.bool:
            raise _fail(name, f"dtype={value.dtype} is not torch.bool", f"Use {name}.bool().")
    _check_dtype(r.group, "group", integer=True)
    for name in _FLOAT_FIELDS:
        value = getattr(r, name)
        if value is not None:
            _check_dtype(value, name, integer=False)
            # the sampler's log-probs may be NaN where it could not score a token (vLLM)
            bad = torch.isinf(value) if name == "sampling_logprobs" else ~torch.isfinite(value)
            if bad.any():
                where = bad.nonzero()[0].tolist()
                raise _fail(
                    name,
                    f"has a non-finite value {value[tuple(where)].item()} at index {where}",
                    "Replace NaN/inf (padding positions must hold finite values, e.g. 0).",
                )

    lengths = r.mask.sum(dim=1)
    empty = (lengths == 0).nonzero().flatten()
    if empty.numel():
        raise _fail(
            "mask",
            f"response {int(empty[0])} has no real token (lengths={lengths.tolist()})",
            "Drop empty responses before building the Rollout; every response needs at least 1 token.",
        )
    # No right-padding check: a False before a row's last True is a context token (a
    # multi-turn rollout's tool output, module docstring), not a malformed mask. What a
    # bool [N, T] mask can get wrong (dtype, shape, an empty row) is checked above.
    if (r.group < 0).any():
        raise _fail("group", f"has negative ids ({r.group.min().item()})", "Use non-negative prompt indices.")
    ids, counts = torch.unique(r.group, return_counts=True)
    single = ids[counts < 2]
    if single.numel() and r.advantages is None:
        raise _fail(
            "group",
            f"group {int(single[0])} has a single response (sizes={dict(zip(ids.tolist(), counts.tolist()))})",
            "Group-relative objectives need G >= 2 responses per prompt; drop singleton groups or sample more "
            "(or pass the advantages, computed over the whole group, as Rollout.advantages).",
        )
    for name in ("old_logprobs", "ref_logprobs", "logprobs", "sampling_logprobs"):
        value = getattr(r, name)
        if value is not None and (value[r.mask] > LOGPROB_SLACK).any():
            raise _fail(
                name,
                f"has a positive log-probability {value[r.mask].max().item():.4g}",
                "Pass log-probabilities (<= 0), not probabilities or logits.",
            )
    if r.entropy is not None and (r.entropy[r.mask] < -LOGPROB_SLACK).any():
        raise _fail("entropy", f"has a negative entropy {r.entropy[r.mask].min().item():.4g}", "Entropies are >= 0.")
    if (r.prompt_tokens is None) != (r.prompt_mask is None):
        raise _fail("prompt_mask", "prompt_tokens and prompt_mask must be given together", "Pass both or neither.")
    if r.prompt_tokens is not None:
        _check_dtype(r.prompt_tokens, "prompt_tokens", integer=True)
        if r.prompt_tokens.dim() != 2 or r.prompt_tokens.shape[0] != n:
            raise _fail("prompt_tokens", f"shape={_shape(r.prompt_tokens)} is not [N={n}, P]", "Stack prompts into [N, P], left-padded.")
        if tuple(r.prompt_mask.shape) != tuple(r.prompt_tokens.shape):
            raise _fail("prompt_mask", f"shape={_shape(r.prompt_mask)} differs from prompt_tokens", "Give it the shape of prompt_tokens.")


def _check_dtype(value: Tensor, name: str, integer: bool) -> None:
    if integer and (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):
        raise _fail(name, f"dtype={value.dtype} is not an integer type", f"Use {name}.long().")
    if not integer and not value.is_floating_point():
        raise _fail(name, f"dtype={value.dtype} is not a float type", f"Use {name}.double() (or .float()).")

"""Variants of a case for the exchangeability test (THEORY.md section 2, (E)).

Each :class:`Mutation` changes something that belongs to one response (its suffix
length, suffix tokens, suffix ratios or suffix entropies, event-consistently) or moves
one shared event's ratio, and keeps the group's shared prefix. Under (E) the vector of
shared-event coefficients across the group may only be rescaled as a whole.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from exchange.checker.cases import Case, common_prefix
from exchange.errors import InvalidArgument

__all__ = ["Mutation", "MUTATION_KINDS", "VOCAB"]

MUTATION_KINDS = ("length", "tokens", "entropy", "ratio", "shared_ratio", "shared_ratios")
# Token ids 0 .. VOCAB - 1: the generated cases' vocabulary (generators.Sizes.vocab's
# default), which a mutation's new suffix tokens are drawn from too.
VOCAB = 4


@dataclass(frozen=True)
class Mutation:
    """Change ``kind`` of response ``response`` in group ``group`` to ``value``.

    - ``length``: new length (>= the shared prefix), truncating or extending the suffix;
    - ``tokens``: redraw the suffix tokens (``value`` seeds them), same length;
    - ``entropy`` / ``ratio``: set every suffix event's entropy / ratio to ``value``;
    - ``shared_ratio``: set the ratio of the shared event at ``position`` to ``value``;
    - ``shared_ratios``: set the ratio of every shared event of the group to ``value`` (a
      sequence-level weight then moves as far as a token-level one; the probes use it).
    """

    kind: str
    group: int
    response: int
    value: float
    position: int = 0

    def __post_init__(self) -> None:
        if self.kind not in MUTATION_KINDS:
            raise InvalidArgument(f"Mutation.kind={self.kind!r} is not one of {MUTATION_KINDS}.")

    def apply(self, case: Case) -> Case:
        grp = case.groups[self.group]
        resp = grp.responses[self.response]
        p = common_prefix(grp.responses)
        if self.kind == "length":
            new_len = max(int(self.value), p, 1)
            if new_len <= len(resp):
                tokens = resp[:new_len]
            else:
                extra = [(resp[-1] + k + 1) % VOCAB for k in range(new_len - len(resp))]
                tokens = resp + tuple(extra)
            return case.with_response(self.group, self.response, tokens)
        if self.kind == "tokens":
            rng = random.Random(int(self.value))
            suffix = tuple(rng.randrange(VOCAB) for _ in range(len(resp) - p))
            return case.with_response(self.group, self.response, resp[:p] + suffix)
        if self.kind == "entropy":
            return case.with_entropy(case.suffix_keys(self.group, self.response), float(self.value))
        if self.kind == "ratio":
            return case.with_ratio(case.suffix_keys(self.group, self.response), float(self.value))
        shared = case.shared_keys(self.group)
        if not shared:
            return case
        if self.kind == "shared_ratios":
            return case.with_ratio(shared, float(self.value))
        return case.with_ratio([shared[min(self.position, len(shared) - 1)]], float(self.value))

"""Mechanisms from evidence (THEORY.md section 4): one module per mechanism the
single-loss checker can attribute, each a function from the mechanism's definition to
:class:`~exchange.checker.mechanisms.evidence.Evidence` (what was moved, what pattern
the coefficients showed, how far above its tolerance), and one rule
(:mod:`exchange.checker.mechanisms.rule`) that combines the evidence into a report's
mechanism set (a frozenset of ids, never a joined string).

- M1 :mod:`~exchange.checker.mechanisms.m1_sequence_weight`
- M2 :mod:`~exchange.checker.mechanisms.m2_sign_clip`
- M3 :mod:`~exchange.checker.mechanisms.m3_response_normaliser`
- M4 :mod:`~exchange.checker.mechanisms.m4_not_zero_sum`
- M5 :mod:`~exchange.checker.mechanisms.m5_response_statistics`
- M6 :mod:`~exchange.checker.mechanisms.m6_additive_term`
- M7 :mod:`~exchange.checker.mechanisms.m7_feature_shaping`

M8 (split updates) is a property of the training schedule, not of ``loss_fn``: a bare
loss check is given one batch and cannot see how a trainer splits a group over
optimizer steps, so no module here produces evidence for it (the recipe audit and the
training monitor report it, :mod:`exchange.audit`). A group selection (a filter on a
group's rewards that drops it whole) is a group constant in THEORY.md, not a mechanism:
the probes re-probe such a group with rewards the loss keeps
(:mod:`exchange.checker.probes`).
"""

"""Mechanisms from evidence (THEORY.md section 4): one module per mechanism the
single-loss checker attributes (``m1_sequence_weight`` .. ``m7_feature_shaping``), each a
function from the mechanism's definition to
:class:`~exchange.checker.mechanisms.evidence.Evidence`, and one rule
(:mod:`exchange.checker.mechanisms.rule`) that combines the evidence into a report's
mechanism set (a frozenset of ids, never a joined string).

M8 (split updates) is a property of the training schedule: a loss check sees it only
where the loss declares its optimizer step (:mod:`exchange.checker.properties.update_rows`),
else the recipe audit and the training monitor report it. A group selection (a filter
that drops a group whole) is a group constant in THEORY.md, not a mechanism
(:mod:`exchange.checker.probes` re-probes such a group).
"""

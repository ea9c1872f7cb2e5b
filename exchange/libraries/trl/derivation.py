"""The verdict THEORY.md derives for a ``trl:`` target, per regime (trl==1.16.0): the
facets (:data:`exchange.core.vocabulary.FACETS`) each TRL setting carries, read from
trl 1.16's ``_compute_loss`` and its training schedule
(:mod:`exchange.libraries.trl.schedule`: a recipe audit judges one optimizer step).
Torch-free apart from the schedule module's import; re-exported by
:mod:`exchange.libraries.trl.loss` as ``expected``.
"""

from __future__ import annotations

from typing import Any, Mapping

from exchange.core.vocabulary import Expected, per_regime, verdict_of
from exchange.libraries.trl.options import defaults
from exchange.libraries.trl.schedule import schedule_of

__all__ = ["expected"]


def expected(loss_type: str, params: Mapping[str, Any] | None = None) -> dict[str, Expected]:
    """The verdict ../shared/reference/rl-libraries.md section 1 predicts, per regime.

    Mechanisms: M3 for the per-sequence mean (grpo, sapo: weight 1/(B L_i)); M2 for the
    sign-dependent clip / SAPO temperatures / VESPO (k, lambda); M1 for sequence-level
    ratios (importance_sampling_level=sequence, VESPO's product of ratios); M4 when
    truncated rows are masked after the advantages were centred; M3 (micro-batch
    normaliser) when the optimizer step accumulates several micro-batches and the loss
    type's normaliser is the token count of each (bnpo; grpo's and
    dr_grpo's row counts are equal, TRL's micro-batches being equal); M8
    (``M8.split_update``: the step's part of a group is not zero-sum, so (Z) and (C)
    fail per update) when the optimizer step holds part of the generation batch
    (``gradient_accumulation_steps`` not a multiple of ``steps_per_generation``). CISPO's detached
    ``min(r, eps_high)`` is a function of the event: no break.

    TRL's per-token factors (THEORY.md section 4, from trl 1.16's ``_compute_loss``):

    - ``top_entropy_quantile < 1``: a mask from the entropy of the token's own context,
      a function of the event on one batch (no break, section 4's subtleties); with
      several micro-batches each takes its own quantile (``M5.micro_batch_quantile``).
    - ``delta``: a cap on the unclipped ratio, decided by the sign of A (M2 off-policy,
      which the PPO-clip loss types carry already; TRL ignores it for the others).
    - ``off_policy_mask_threshold``: negative-advantage responses whose mean
      ``log pi_sampler - log pi`` exceeds the threshold leave the loss, a selection by
      the advantage's sign (``M2.sign_clip``). Without vLLM the mean is 0 on-policy: a
      threshold >= 0 keeps everything there, a negative one drops every negative
      advantage (positive-only: ``M4.not_zero_sum``, both regimes). With vLLM the
      sampler's log-probs differ from the policy's on-policy too: both facets, both
      regimes (identical responses share their mean, so the drop is one-signed).
    - vLLM's importance-sampling correction: ``token_*`` modes weight each token by
      ``pi_old / pi_vLLM`` of its own event, truncated or masked (no break, like
      CISPO's detached ratio); ``sequence_*`` modes weight every token of a response by
      the product over the response (truncated or masked): a weight from a
      response-level statistic (``M5.response_statistics``), on-policy too. VESPO folds
      the ratio into its sequence weight in every mode (M5 too).
    - ``multi_objective_aggregation=normalize_then_sum``: per-function group
      standardisation, then one batch scale (the batch mean of group-centred sums is
      0): no break.

    The KL term (``beta != 0``): k3 to the reference policy on the sampled tokens, an
    additive event term (``M6.event_term``, both regimes: its gradient ``1 - exp(ref -
    l)`` is not 0 on-policy). With ``use_bias_correction_kl`` (TRL's default) it is
    multiplied by the importance ratio, which is not detached: a token-level ratio keeps
    it a function of the event; a sequence-level one (``importance_sampling_level=
    sequence``) adds, through its gradient ``1 / L_i`` on-policy, the response's mean KL
    to every one of its tokens: a response's KL shaping its coefficients as a KL in the
    reward does (``M7.shaping``).
    """
    p = dict(defaults())
    p.update(params or {})
    on: set[str] = set()
    off: set[str] = set()
    if loss_type in ("grpo", "sapo"):
        on.add("M3.response_norm")
    sequence = p["importance_sampling_level"] == "sequence"
    if loss_type in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "sapo", "vespo"):
        off.add("M2.sign_clip")
    if (sequence and loss_type != "vespo") or loss_type == "vespo":
        off.add("M1.sequence_weight")
    if _true(p["mask_truncated_completions"]):
        on.add("M4.not_zero_sum")
    # the optimizer step judged (THEORY.md section 4): TRL's micro-batches have equal row
    # counts, so grpo/sapo/luspo/dr_grpo's per-micro-batch row count is one constant; bnpo's
    # token count differs between the micro-batches accumulated into one step (dapo, cispo
    # and vespo divide by the generation batch's tokens), and so does each micro-batch's
    # entropy quantile; a step that holds part of a generation batch splits its groups (M8)
    plan = schedule_of(p)
    micro = min(plan.judged, plan.micro_batches) > 1
    if micro and loss_type == "bnpo":
        on.add("M3.micro_batch_norm")
    if micro and float(p["top_entropy_quantile"]) < 1.0:
        on.add("M5.micro_batch_quantile")
    if plan.splits_groups:
        on.add("M8.split_update")
    if float(p["beta"]) != 0.0:
        on.add("M6.event_term")
        if sequence and _true(p["use_bias_correction_kl"]):
            on.add("M7.shaping")
    vllm = _true(p["use_vllm"])
    threshold = p["off_policy_mask_threshold"]
    if threshold not in (None, "None", "none"):
        if vllm:
            on |= {"M2.sign_clip", "M4.not_zero_sum"}
        elif float(threshold) < 0:
            on.add("M4.not_zero_sum")
            off.add("M2.sign_clip")
        else:
            off.add("M2.sign_clip")
    if vllm and _true(p["vllm_importance_sampling_correction"]) and (
            str(p["vllm_importance_sampling_mode"]).startswith("sequence") or loss_type == "vespo"):
        on.add("M5.response_statistics")
    off |= on
    return per_regime(verdict_of(*on), verdict_of(*off))


def _true(value: Any) -> bool:
    return str(value).lower() in ("true", "1", "yes")

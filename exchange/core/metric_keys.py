"""The metric keys exchange's instruments log, one key per quantity, defined once.

The training integrations (:mod:`exchange.libraries.trl`: ``ExchangeCallback`` and
``ExchangeGRPOTrainer``) and the lab (:mod:`exchange.lab.instruments`, the CPU harness and
the TRL runs of :mod:`exchange.lab.llm_run`) import these names instead of spelling the
strings, so a quantity has the same key in a TRL ``log_history``, in every ``report_to``
backend and in a lab run's ``metrics.jsonl``, and the lab's reports
(:data:`exchange.lab.predictions.MANIPULATION_KEY`) read it under that key.

Every key the lab wrote before these names were unified is unchanged (its runs stay
readable as they are). The TRL integrations logged ``exchange/shared_residual``,
``exchange/shared_events``, ``exchange/p1_share``, ``exchange/learning_tax`` and
``exchange/learning_tax_skipped`` until issue 29; TRL logs are not read back by exchange.
"""

from __future__ import annotations

__all__ = [
    "SHARED_RESIDUAL",
    "SHARED_EVENTS",
    "SHARED_KAPPA_SHARE",
    "LEARNING_TAX",
    "LEARNING_TAX_SKIPPED",
    "INTEGRATION_KEYS",
    # the lab's keys (exchange.lab: the CPU harness and the TRL runs write one row per step)
    "REWARD", "LENGTH", "TRUNCATED", "SAMPLES", "ZERO_SPREAD_GROUPS", "ROLLOUT_HASH",
    "LOSS", "GRAD_NORM", "LR", "LOG_RATIO_ABSMAX", "COV_REWARD_INV_LEN",
    "KAPPA_SHARE", "EVENT_SHARE", "SHARED_UPDATE_SHARE", "SHARED_K_SIGNED", "STYLE_K_SIGNED", "STYLE_RESIDUAL",
    "ENTROPY_K_SIGNED",
    "CLIP_POS_ADV", "CLIP_NEG_ADV", "CLIP_LOW", "CLIP_HIGH", "CLIP_REGION",
    "ENTROPY_ALL", "ENTROPY_TEMPLATE", "ENTROPY_STYLE", "ENTROPY_FILLER", "ENTROPY_WEAK_CREDIT", "ENTROPY_DECISION",
    "ENTROPY_FIXED_WEAK_CREDIT", "ENTROPY_FIXED_STYLE",
    "DRIFT_TEMPLATE", "DRIFT_STYLE", "DRIFT_FILLER", "DRIFT_DECISION", "DRIFT_ZERO_CREDIT", "DRIFT_REF_SEQ",
    "DRIFT_SHORT_VS_LONG",
    "KL_REF", "KL_ALL", "KL_SHARED", "KL_CONTROL", "KL_ROLLOUT_CONTROL", "KL_SCALE", "KL_CUMULATIVE",
    "KL_PROP31_MEASURED", "KL_PROP31_PREDICTED",
    "ATTR_GRAD_MATCH", "ATTR_SAMPLED_ENTROPY_GAP", "attr_path", "attr_shared", "attr_start",
    "CERT_FILLER_ACCURACY", "CERT_FILLER_FLAT", "CERT_FILLER_P", "cert_style",
    "EVAL_ACCURACY", "TRL_PREFIX", "trl_key", "NAMESPACES",
]

SHARED_RESIDUAL = "tax/shared_residual"
""":func:`exchange.core.events.shared_residual` of the batch: the share of the coefficient
mass on shared events that does not cancel (the lab's manipulation check)."""

SHARED_EVENTS = "tax/shared_events"
"""The number of shared events in the batch (:attr:`~exchange.core.events.SharedResidual.events`)."""

SHARED_KAPPA_SHARE = "tax/shared_kappa_share"
"""P1 in coefficient space: ``sum |kappa|`` over the occurrences of shared events
(:attr:`~exchange.core.events.SharedResidual.mass`) over ``sum |kappa|`` over all tokens."""

LEARNING_TAX = "tax/learning_tax"
""":attr:`exchange.paramspace.LearningTax.tax`: the update-norm share of zero-credit
occurrences (one extra backward pass; ``ExchangeGRPOTrainer(learning_tax=True)``)."""

LEARNING_TAX_SKIPPED = "tax/learning_tax_skipped"
"""1 for each batch whose learning tax was undefined (a zero update) and not logged."""

INTEGRATION_KEYS: tuple[str, ...] = (SHARED_RESIDUAL, SHARED_EVENTS, SHARED_KAPPA_SHARE, LEARNING_TAX,
                                     LEARNING_TAX_SKIPPED)
"""The keys the library integrations log (a lab run keeps them under these names)."""

# ------------------------------------------------------------------ the lab's keys
# One row per step in a lab run's metrics.jsonl (exchange.lab.trainer on the CPU,
# exchange.lab.llm_run through TRL); the report, the pilot and the plots read them back under
# these names. Values are those the committed run files hold: a key never changes its string.

REWARD = "charts/reward"
"""Mean sampled reward of the step's rollout (TRL's ``reward``)."""
LENGTH = "charts/length"
"""Mean response length of the step's rollout (TRL's ``completions/mean_length``)."""
TRUNCATED = "charts/truncated"
"""Share of the rollout's responses cut at the length limit."""
SAMPLES = "charts/samples"
"""Responses sampled so far (the x axis of the curves)."""
ZERO_SPREAD_GROUPS = "charts/zero_spread_groups"
"""Share of the rollout's groups whose rewards are all equal (the pilot's refusal rule)."""
ROLLOUT_HASH = "charts/rollout_hash"
"""A 52-bit hash of the rollout every arm of a seed shares (common rollouts' check)."""

LOSS = "losses/loss"
"""The objective's loss value."""
GRAD_NORM = "losses/grad_norm"
"""TRL's ``grad_norm``."""
LR = "losses/lr"
"""TRL's ``learning_rate``."""
LOG_RATIO_ABSMAX = "losses/log_ratio_absmax"
"""``max |log pi - log pi_old|`` over the minibatch's tokens (how far reuse moved the ratios)."""
COV_REWARD_INV_LEN = "len/cov_reward_inv_len"
"""cov(R, 1/L) over the rollout (M3's reward-length link)."""

KAPPA_SHARE = "tax/kappa_share"
"""Share of ``sum |kappa|`` on zero-credit occurrences."""
EVENT_SHARE = "tax/event_share"
"""Share of ``sum |K_e|`` on zero-credit events (P1 in event space)."""
SHARED_UPDATE_SHARE = "tax/shared_update_share"
"""P1: the update-norm share sent through the shared events (one extra backward)."""
SHARED_K_SIGNED = "tax/shared_K_signed"
"""Signed mean ``K_e`` over shared events."""
STYLE_K_SIGNED = "tax/style_K_signed"
"""Signed mean ``K_e`` at the probe S (P2's orientation)."""
STYLE_RESIDUAL = "tax/style_residual"
"""Share of the coefficient mass left at S (the dose arms' kept fraction)."""
ENTROPY_K_SIGNED = "tax/entropy_K_signed"
"""P3's orientation per sampled context: ``K`` signed by ``-(log p + H)``."""

CLIP_POS_ADV = "clip/frac_pos_adv"
"""Share of A > 0 tokens whose gradient the clip zeroes."""
CLIP_NEG_ADV = "clip/frac_neg_adv"
"""Share of A < 0 tokens whose gradient the clip zeroes."""
CLIP_LOW = "clip/frac_low"
"""TRL's ``clip_ratio/low_mean``."""
CLIP_HIGH = "clip/frac_high"
"""TRL's ``clip_ratio/high_mean``."""
CLIP_REGION = "clip/frac_region"
"""TRL's ``clip_ratio/region_mean``."""

ENTROPY_ALL = "entropy/all"
"""TRL's ``entropy``."""
ENTROPY_TEMPLATE = "entropy/template"
"""Sampling entropy at template positions."""
ENTROPY_STYLE = "entropy/style"
"""Sampling entropy at S's position."""
ENTROPY_FILLER = "entropy/filler"
"""Sampling entropy at filler positions."""
ENTROPY_WEAK_CREDIT = "entropy/weak_credit"
"""Sampling entropy at every position but the decision."""
ENTROPY_DECISION = "entropy/decision"
"""Sampling entropy at the decision (answer) positions."""
ENTROPY_FIXED_WEAK_CREDIT = "entropy/fixed_weak_credit"
"""P3's probe: entropy at the fixed weak-credit contexts of the drift probes."""
ENTROPY_FIXED_STYLE = "entropy/fixed_style"
"""Entropy at S's fixed probe contexts."""

DRIFT_TEMPLATE = "drift/template_logp"
"""Mean log-prob of the probes' template tokens."""
DRIFT_STYLE = "drift/style_logp"
"""P2's probe: mean log p(S) at the fixed probe contexts."""
DRIFT_FILLER = "drift/filler_logp"
"""Mean log-prob of the probes' filler tokens."""
DRIFT_DECISION = "drift/decision_logp"
"""Mean log-prob of the probes' decision tokens."""
DRIFT_ZERO_CREDIT = "drift/zero_credit_logp"
"""Mean log-prob of the probes' zero-credit tokens."""
DRIFT_REF_SEQ = "drift/ref_seq_logp"
"""Mean sequence log-prob of the probes' reference solutions."""
DRIFT_SHORT_VS_LONG = "drift/short_vs_long_logodds"
"""Log-odds of the short over the long reference solution of each probe prompt."""

KL_REF = "kl/ref"
"""TRL's ``kl`` (to the reference model)."""
KL_ALL = "kl/all_contexts"
"""KL(pi_before || pi_after) of the step over every response context."""
KL_SHARED = "kl/shared_contexts"
"""The step's KL at the shared events' contexts."""
KL_CONTROL = "kl/control_contexts"
"""The step's KL at the control contexts (neither shared nor probe): what the KL-normalised step matches."""
KL_ROLLOUT_CONTROL = "kl/rollout_control"
"""The rollout's control-context KL after the KL-normalised step (TRL runs)."""
KL_SCALE = "kl/scale"
"""The KL-normalised step's rescale factor (capped: exchange.lab.klstep.SCALE_CAP)."""
KL_CUMULATIVE = "kl/cumulative"
"""Sum over steps of the control-context KL (curves against cumulative KL)."""
KL_PROP31_MEASURED = "kl/prop31_measured"
"""The step's measured KL on eval steps (Prop. 3.1's check)."""
KL_PROP31_PREDICTED = "kl/prop31_predicted"
"""Prop. 3.1's predicted KL of the same step."""

ATTR_GRAD_MATCH = "attr/grad_match"
"""The TRL attribution's largest relative mismatch of the shared part against TRL's gradient."""
ATTR_SAMPLED_ENTROPY_GAP = "attr/sampled_weak_credit_entropy/gap"
"""Per step, before its update: ``<grad of the entropy at the weak-credit positions of the
rollout just sampled, the shared part's cumulative shift>``
(:meth:`exchange.lab.attribution.ProbeAttribution.at_contexts`): the first-order gap to a run
without the shared residual at those contexts (P3 at sampled contexts, issue 42)."""


def attr_path(probe: str) -> str:
    """``attr/<probe>/path``: the probe's first-order change along the run's path."""
    return f"attr/{probe}/path"


def attr_shared(probe: str) -> str:
    """``attr/<probe>/shared``: the part of that change the shared-event residual caused (delta_hat)."""
    return f"attr/{probe}/shared"


def attr_start(probe: str) -> str:
    """``attr/<probe>/start``: the probe's value at the rollout's start (TRL runs)."""
    return f"attr/{probe}/start"


CERT_FILLER_ACCURACY = "cert/filler_accuracy"
"""Greedy accuracy by forced filler count (the zero-credit certificate)."""
CERT_FILLER_FLAT = "cert/filler_flat"
"""Whether that accuracy is homogeneous (filler carries no credit)."""
CERT_FILLER_P = "cert/filler_p"
"""The homogeneity test's p-value."""


def cert_style(field: str) -> str:
    """``cert/style_<field>``: a field of S's forced-prefix credit (exchange.lab.certificate.StyleCredit)."""
    return f"cert/style_{field}"


EVAL_ACCURACY = "eval/accuracy"
"""Greedy accuracy on the held-out eval prompts."""

TRL_PREFIX = "trl/"
"""TRL's own log keys that name no lab quantity keep their name under this prefix."""


def trl_key(name: str) -> str:
    """``trl/<name>``: a TRL log key kept as it is."""
    return TRL_PREFIX + name


NAMESPACES: tuple[str, ...] = ("charts", "losses", "len", "tax", "clip", "entropy", "drift", "kl", "attr", "cert",
                               "eval", "trl")
"""The namespaces of exchange's keys: a string ``<namespace>/...`` anywhere else in the
package is a key spelled twice (tests/lab/test_one_runner.py)."""

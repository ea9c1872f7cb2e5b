"""What one optimizer step of a verl config trains: ``exchange check --verl-config`` (verl==0.9.1).

:func:`read_recipe` reads a config composed by :func:`exchange.libraries.verl.config.load_config`
and returns a :class:`VerlRecipe`: the ``verl:<loss_mode>/<loss_agg_mode>`` target with
every loss setting, the schedule of optimizer steps, and what is present but outside
the coefficient model. Every key that changes a verdict is modelled here or refused by
its full path (:class:`~exchange.errors.InvalidArgument`, one line, the reason and the fix).

**The loss** (the ``verl:`` target, :mod:`exchange.libraries.verl.loss`):
``actor_rollout_ref.actor.{policy_loss.loss_mode and its sub-keys, loss_agg_mode,
clip_ratio, clip_ratio_low/high/c, tau_pos/tau_neg, loss_scale_factor, use_kl_loss,
kl_loss_type, kl_loss_coef}`` and ``algorithm.{adv_estimator, norm_adv_by_std_in_grpo,
gamma}``.

**One optimizer step** (THEORY.md section 4: a recipe audit judges one optimizer step;
verl 0.9.1's ``ray_trainer``/``v1.trainer_base`` and ``engine_workers.train_mini_batch``):
a generation batch holds ``data.train_batch_size`` prompts times ``rollout.n`` responses;
each optimizer step takes a mini-batch of ``actor.ppo_mini_batch_size * rollout.n`` rows,
``ppo_epochs`` times over the batch. ``trainer.balance_batch`` (default on) reorders the
rows by sequence length before the split, and ``actor.shuffle`` shuffles each rank's rows,
so with more than one mini-batch a group's responses fall into different optimizer
steps: **M8**, named with those keys. Without either, the rows stay in verl's order
(``repeat(interleave=True)``: each group contiguous) and groups stay whole when each
rank's share of the batch and of a mini-batch are multiples of ``rollout.n``. Steps after
the first (``ppo_epochs > 1`` or several mini-batches) are off-policy. Micro-batches
(``ppo_micro_batch_size_per_gpu``, ``use_dynamic_bsz``) accumulate inside a step, and
verl 0.9.1's ``ppo_loss`` normalises each by the mini-batch's global token and sequence
counts (``global_batch_info``), so the step's gradient is the loss of the whole
mini-batch: they change no verdict.

**Present, not coefficients**: the entropy bonus (``entropy_coeff``), a whole-distribution
regulariser (THEORY.md section 1); a filter of groups (``algorithm.filter_groups``, DAPO's
dynamic sampling), a group selection: a group constant, not a mechanism.

**Refused**: ``adv_estimator`` gae/optimal_token_baseline/tir_optimal_token_baseline/gdpo,
``loss_mode`` bypass_mode or ``exchange_*``, ``algorithm.rollout_correction`` (rollout_is,
rollout_rs, bypass_mode), ``algorithm.use_kl_in_reward`` (and with it ``kl_penalty``,
``kl_ctrl``, read only then), ``algorithm.use_pf_ppo``, ``distillation.enabled``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from exchange.core.vocabulary import FACETS, PROPERTY_LETTERS, PROPERTY_NAMES, breaks_of
from exchange.errors import InvalidArgument

__all__ = ["Schedule", "VerlRecipe", "read_recipe"]

A = "actor_rollout_ref.actor."
# What a split step breaks, read on one optimizer step (THEORY.md section 4): defined once,
# by the facet, for this audit and TRL's (exchange.libraries.trl.loss.expected).
SPLIT = "M8.split_update"
SPLIT_BREAKS = breaks_of((SPLIT,))
_NOT_DRIVEN = {
    "gae": "it needs a critic's values (a value model is outside loss_fn(logprobs, rollout))",
    "optimal_token_baseline": "it needs sum_pi_squared, the whole next-token distribution",
    "tir_optimal_token_baseline": "it needs sum_pi_squared, the whole next-token distribution",
    "gdpo": "it needs several reward keys",
}
# The loss's settings: verl's path -> the verl: target's parameter.
_LOSS_KEYS = {
    **{A + k: k for k in ("clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "tau_pos", "tau_neg",
                          "loss_scale_factor", "use_kl_loss", "kl_loss_type", "kl_loss_coef")},
    **{A + "policy_loss." + k: k for k in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio",
                                           "ppo_kl_coef", "dro_beta")},
    "algorithm.adv_estimator": "estimator",
    "algorithm.norm_adv_by_std_in_grpo": "norm_adv_by_std_in_grpo",
    "algorithm.gamma": "gamma",
}


@dataclass(frozen=True)
class Schedule:
    """The optimizer steps of one generation batch.

    Fields:
        rows: responses in a generation batch (``train_batch_size * n``).
        group_size: ``rollout.n``.
        mini_rows: rows per optimizer step (``ppo_mini_batch_size * n``).
        steps: optimizer steps per generation batch (mini-batches times ``ppo_epochs``).
        dp: data-parallel ranks (``n_gpus_per_node * nnodes / ulysses_sequence_parallel_size``).
        split_by: the settings that spread a group over several steps (M8); empty when
            every step holds whole groups.
        fix: how to keep groups whole ("" when they are).
    """

    rows: int
    group_size: int
    mini_rows: int
    steps: int
    dp: int
    split_by: tuple[str, ...] = ()
    fix: str = ""

    @property
    def split(self) -> bool:
        """M8: some group's responses fall into different optimizer steps."""
        return bool(self.split_by)

    def describe(self) -> str:
        """One paragraph: the steps, which are off-policy, whether groups stay whole."""
        mini = self.rows // self.mini_rows
        text = (f"{self.rows} responses per generation batch ({self.rows // self.group_size} groups of "
                f"{self.group_size}), {self.mini_rows} per optimizer step: {self.steps} step(s) per batch")
        if self.steps > 1:
            text += "; step 1 is on-policy, the later ones off-policy (the off-policy verdict applies to them)"
        if self.split:
            fails = " and ".join(f"({PROPERTY_LETTERS[p]})" for p in PROPERTY_NAMES if p in SPLIT_BREAKS)
            text += (f". M8 split updates: {', '.join(self.split_by)} spread each group over the {mini} mini-batches, "
                     "so each step's shared-event coefficients cancel only across steps: "
                     f"{fails} fail per update. Fix: {self.fix}")
        else:
            text += ". Every step holds whole groups: the loss's verdict is the step's"
        return text + "."


@dataclass(frozen=True)
class VerlRecipe:
    """One optimizer step of a verl config.

    Fields:
        loss_mode, loss_agg_mode: the ``verl:`` target's two parts.
        params: the ``verl:`` target's parameters that differ from its defaults (short
            names, :data:`exchange.libraries.verl.loss.DEFAULTS`), as strings.
        schedule: :class:`Schedule`.
        present: what the step holds outside the coefficient model, one line each.
    """

    loss_mode: str
    loss_agg_mode: str
    params: dict[str, str]
    schedule: Schedule
    present: tuple[str, ...] = field(default_factory=tuple)

    @property
    def target(self) -> str:
        return f"verl:{self.loss_mode}/{self.loss_agg_mode}"

    @property
    def kl_note(self) -> str:
        """Where the checked loss's KL comes from ("" without one): verl's
        ``use_kl_loss``, in the loss the checker ran, not a ``regularizer=``."""
        if str(self.params.get("use_kl_loss", "False")).lower() not in ("true", "1", "yes"):
            return ""
        from exchange.libraries.verl.loss import DEFAULTS

        kind = self.params.get("kl_loss_type", DEFAULTS["kl_loss_type"])
        coef = self.params.get("kl_loss_coef", DEFAULTS["kl_loss_coef"])
        return (f"{A}use_kl_loss=True: {coef} x kl_penalty {kind} to the reference policy on the sampled tokens, "
                "aggregated like the policy loss, is in the checked loss (an additive event term, M6, in both regimes)")

    def loss_expected(self):
        """The loss's verdict per regime (:func:`exchange.libraries.verl.loss.expected`)."""
        from exchange.libraries.verl.loss import expected

        return expected(self.loss_mode, self.loss_agg_mode, self.params)

    def step_expected(self) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
        """Per regime, ``(broken properties, mechanisms)`` of one optimizer step: the
        loss's, plus the facet ``M8.split_update`` when the schedule splits groups
        (:data:`SPLIT_BREAKS`, the one definition the TRL schedule audit uses too)."""
        out = {}
        for regime, exp in self.loss_expected().items():
            breaks, mechanisms = set(exp.breaks), set(exp.mechanisms)
            if self.schedule.split:
                breaks |= SPLIT_BREAKS
                mechanisms.add(FACETS[SPLIT].mechanism)
            out[str(getattr(regime, "value", regime))] = (frozenset(breaks), frozenset(mechanisms))
        return out

    def to_dict(self) -> dict[str, Any]:
        s = self.schedule
        return {
            "target": self.target, "params": dict(self.params), "present": list(self.present), "kl": self.kl_note,
            "schedule": {"rows": s.rows, "group_size": s.group_size, "mini_rows": s.mini_rows, "steps": s.steps,
                         "dp": s.dp, "split_by": list(s.split_by), "fix": s.fix, "M8": s.split},
        }


def _get(cfg, key: str, default: Any = None) -> Any:
    from omegaconf import OmegaConf

    try:
        return OmegaConf.select(cfg, key, default=default)
    except Exception as err:  # an interpolation the user left unresolved (${oc.env:...}, a shell variable)
        raise InvalidArgument(f"--verl-config: {key} cannot be resolved ({' '.join(str(err).split()[:20])}); "
                              "give it a value.") from None


def _int(cfg, key: str) -> int:
    value = _get(cfg, key)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"--verl-config: {key}={value!r} is not an integer; give it one.") from None
    if number < 1 or number != value:
        raise InvalidArgument(f"--verl-config: {key}={value!r} must be a positive integer.")
    return number


def _refuse(cfg) -> None:
    """Raise for the first setting the audit does not drive (module docstring)."""
    from exchange.libraries.verl.loss import ESTIMATORS, POLICY_LOSSES

    estimator = _get(cfg, "algorithm.adv_estimator")
    if estimator in _NOT_DRIVEN:
        raise InvalidArgument(f"--verl-config: algorithm.adv_estimator={estimator} is not driven: "
                              f"{_NOT_DRIVEN[estimator]}. Driven: {', '.join(ESTIMATORS)}.")
    if estimator not in ESTIMATORS:
        raise InvalidArgument(f"--verl-config: algorithm.adv_estimator={estimator!r} is not one of verl 0.9.1's "
                              f"driven estimators ({', '.join(ESTIMATORS)}).")
    mode = _get(cfg, A + "policy_loss.loss_mode")
    if isinstance(mode, str) and mode.startswith("exchange_"):
        raise InvalidArgument(f"--verl-config: {A}policy_loss.loss_mode={mode} is an exchange objective registered "
                              f"in verl; audit it directly: exchange check {mode[len('exchange_'):]}.")
    if mode not in POLICY_LOSSES:
        why = " (it needs the sampler's log-probs)" if mode == "bypass_mode" else ""
        raise InvalidArgument(f"--verl-config: {A}policy_loss.loss_mode={mode!r} is not driven{why}; "
                              f"driven: {', '.join(POLICY_LOSSES)}.")
    rc = "algorithm.rollout_correction."
    for key in ("rollout_is", "rollout_rs"):
        if _get(cfg, rc + key) is not None:
            raise InvalidArgument(f"--verl-config: {rc}{key}={_get(cfg, rc + key)} is not driven: rollout correction "
                                  f"weights come from the sampler's log-probs, which a loss check has not; set {rc}{key}=null "
                                  "to audit the rest.")
    if _get(cfg, rc + "bypass_mode"):
        raise InvalidArgument(f"--verl-config: {rc}bypass_mode=true is not driven (the sampler's log-probs replace "
                              f"the old policy's); set it false to audit the rest.")
    if _get(cfg, A + "policy_loss.rollout_correction") is not None:
        raise InvalidArgument(f"--verl-config: {A}policy_loss.rollout_correction is not driven (the sampler's "
                              "log-probs); remove it to audit the rest.")
    if _get(cfg, "algorithm.use_kl_in_reward"):
        raise InvalidArgument("--verl-config: algorithm.use_kl_in_reward=true (with algorithm.kl_penalty and "
                              "algorithm.kl_ctrl) is not driven: it subtracts each response's own KL from its reward, "
                              "a response-feature shaping (M7, THEORY.md section 4); use "
                              f"{A}use_kl_loss=true for a KL the audit models, or audit with use_kl_in_reward=false.")
    if _get(cfg, "algorithm.use_pf_ppo"):
        raise InvalidArgument("--verl-config: algorithm.use_pf_ppo=true is not driven: it resamples the batch by "
                              "reward, so a group's rows repeat or vanish; audit with use_pf_ppo=false.")
    if _get(cfg, "distillation.enabled"):
        raise InvalidArgument("--verl-config: distillation.enabled=true is not driven: it adds a teacher's "
                              "distillation loss; audit with distillation.enabled=false.")


def _schedule(cfg) -> Schedule:
    n = _int(cfg, "actor_rollout_ref.rollout.n")
    batch = _int(cfg, "data.train_batch_size")
    mini = _int(cfg, A + "ppo_mini_batch_size")
    epochs = _int(cfg, A + "ppo_epochs")
    gpus = _int(cfg, "trainer.n_gpus_per_node") * _int(cfg, "trainer.nnodes")
    sp = int(_get(cfg, A + "ulysses_sequence_parallel_size", 1) or 1)
    dp = max(gpus // sp, 1)
    if mini > batch:
        raise InvalidArgument(f"--verl-config: {A}ppo_mini_batch_size={mini} > data.train_batch_size={batch}; "
                              "verl refuses it (ActorConfig.validate): make it at most the train batch.")
    micro = (_get(cfg, A + "ppo_micro_batch_size"), _get(cfg, A + "ppo_micro_batch_size_per_gpu"))
    if not _get(cfg, A + "use_dynamic_bsz") and micro == (None, None):
        raise InvalidArgument(f"--verl-config: {A}ppo_micro_batch_size_per_gpu=null with use_dynamic_bsz=False; verl "
                              f"refuses it (ActorConfig): set {A}ppo_micro_batch_size_per_gpu (it changes no verdict) "
                              f"or {A}use_dynamic_bsz=True.")
    rows, mini_rows = batch * n, mini * n
    if batch % mini or mini_rows % dp or rows % dp:
        raise InvalidArgument(f"--verl-config: data.train_batch_size={batch} must be a multiple of {A}"
                              f"ppo_mini_batch_size={mini}, and ppo_mini_batch_size * rollout.n={mini_rows} a multiple "
                              f"of the {dp} data-parallel ranks (verl's train_mini_batch asserts both).")
    split_by: list[str] = []
    if batch > mini:
        whole = (mini_rows // dp) % n == 0 and (rows // dp) % n == 0
        if _get(cfg, "trainer.balance_batch"):
            split_by.append("trainer.balance_batch=True (rows reordered by length)")
        if _get(cfg, A + "shuffle"):
            split_by.append(f"{A}shuffle=True (each rank's rows shuffled)")
        if not whole:
            split_by.append(f"a rank's share of a mini-batch ({mini_rows // dp} rows) is not a multiple of "
                            f"rollout.n={n}")
        if split_by:
            split_by.insert(0, f"{A}ppo_mini_batch_size={mini} < data.train_batch_size={batch}")
    fix = (f"{A}ppo_mini_batch_size={batch} (one optimizer step per generation batch), or "
           f"trainer.balance_batch=False and {A}shuffle=False with ppo_mini_batch_size a multiple of the {dp} "
           "data-parallel ranks") if split_by else ""
    return Schedule(rows, n, mini_rows, batch // mini * epochs, dp, tuple(split_by), fix)


def _present(cfg) -> tuple[str, ...]:
    out = []
    entropy = _get(cfg, A + "entropy_coeff", 0) or 0
    if float(entropy) != 0.0:
        out.append(f"{A}entropy_coeff={entropy}: an entropy bonus of the whole next-token distribution, outside "
                   "the coefficient model (THEORY.md section 1); present, not checked")
    if _get(cfg, "algorithm.filter_groups.enable"):
        metric = _get(cfg, "algorithm.filter_groups.metric")
        out.append(f"algorithm.filter_groups.enable=True (metric={metric}): a group selection (dynamic sampling "
                   "drops whole groups whose rewards tie): a group constant, not a mechanism (THEORY.md section 4)")
    return tuple(out)


def read_recipe(cfg) -> VerlRecipe:
    """The :class:`VerlRecipe` of a composed verl config (refusals: module docstring)."""
    from exchange.libraries.verl.loss import AGG_MODES, DEFAULTS

    _refuse(cfg)
    mode = _get(cfg, A + "loss_agg_mode")
    if mode not in AGG_MODES:
        raise InvalidArgument(f"--verl-config: {A}loss_agg_mode={mode!r} is not one of {', '.join(AGG_MODES)}.")
    params: dict[str, str] = {}
    kl = bool(_get(cfg, A + "use_kl_loss"))
    for key, name in _LOSS_KEYS.items():
        if name in ("kl_loss_type", "kl_loss_coef") and not kl:
            continue  # read only with use_kl_loss (losses.py::ppo_loss)
        value = _get(cfg, key, DEFAULTS[name])
        if value != DEFAULTS[name]:
            params[name] = str(value)
    return VerlRecipe(str(_get(cfg, A + "policy_loss.loss_mode")), str(mode), params, _schedule(cfg), _present(cfg))

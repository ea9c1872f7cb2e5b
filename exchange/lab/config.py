"""Experiments as data: TOML configs parsed into frozen dataclasses.

An experiment is one *paired* comparison: two arms that differ only in the objective
spec (the mechanism), with the task, model, warm start, optimizer, rollout budget and
seeds fixed. ``load_experiment(path)`` validates everything up front and raises
:class:`~exchange.errors.InvalidArgument` naming ``[section] key=value`` and the fix.

Example (``experiments/configs/grpo_group_constant_norm.toml``)::

    name = "grpo_norm"
    seeds = [0, 1, 2, 3, 4]
    [task]
    name = "arithmetic"
    [train]
    steps = 150
    [[arms]]
    name = "grpo"
    objective = "grpo"
    role = "baseline"
    [[arms]]
    name = "grpo+group_constant_norm"
    objective = "grpo+group_constant_norm"
    role = "treatment"
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exchange.errors import ExchangeError, InvalidArgument
from exchange.lab.tasks import TASKS, get_task
from exchange.objectives import resolve

__all__ = [
    "TaskConfig", "ModelConfig", "SFTConfig", "TrainConfig", "Arm", "ExperimentConfig",
    "RunConfig", "load_experiment", "parse_experiment",
]

ROLES = ("baseline", "surgical", "treatment", "dose")
"""baseline: the objective that breaks (E); surgical: the same objective with only its
shared-event residual removed (``"<spec>+surgical"``, the pathway test of P1-P3);
treatment: the restoring transformation (the method test of P4); dose (issue 42): the
baseline's objective keeping a fraction ``keep`` of its shared residual
(:func:`exchange.lab.dose.dosed`; ``keep = 0`` is the surgical arm, 1 the baseline). An
experiment has a baseline and at least one of surgical/treatment, and any number of
dose arms (they need a surgical arm: each dose is measured against it)."""


@dataclass(frozen=True)
class TaskConfig:
    name: str = "arithmetic"
    """One of ``exchange.lab.tasks.TASKS``: arithmetic, pattern, countdown."""
    max_filler: int = 3
    """The grammar's cap on reward-irrelevant filler tokens; the warm start draws 0..max_filler."""
    style_p: float = 0.9
    """Warm-start probability of the shared style token S after the template."""
    long_wrong: bool = False
    """M3's reward-length link (``exchange.lab.tasks.Task.long_wrong``): filler only after a
    wrong answer, so wrong answers run long."""
    template_in_prompt: bool = False
    """The template ends the prompt (``exchange.lab.tasks.Task.template_in_prompt``), so the
    shared mass is the probe event S, not the template."""
    forced_style: bool = False
    """The teacher-forced shared prefix (``exchange.lab.tasks.Task.forced_style``): S in every
    response, zero-credit by construction; needs ``template_in_prompt``."""
    probe_as_filler: bool = False
    """Issue 42's non-private probe (``exchange.lab.tasks.Task.probe_as_filler``): S is also a
    sampled filler token, so its output row carries gradient that is not the residual;
    needs ``forced_style``."""
    fixed_answer: bool = False
    """Issue 42's M1 design (``exchange.lab.tasks.Task.fixed_answer``): exactly ``answer_len``
    decision tokens in every response, so with ``max_filler = 0`` every response has one length."""
    exact_filler: bool = False
    """Issue 42's non-private M1 design (``exchange.lab.tasks.Task.exact_filler``): exactly
    ``max_filler`` fillers in every response, so with ``fixed_answer`` every response has one
    length while a filler may be S (``probe_as_filler``)."""

    def build(self):
        """The :class:`exchange.lab.tasks.Task` this section describes."""
        return get_task(self.name, self.max_filler, self.style_p, self.long_wrong, self.template_in_prompt,
                        self.forced_style, self.probe_as_filler, self.fixed_answer, self.exact_filler)


@dataclass(frozen=True)
class ModelConfig:
    kind: str = "transformer"
    """transformer (TinyLM) or tabular (one logit row per context: the no-spillover control)."""
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 2
    table_size: int = 65536
    """tabular: the most contexts a run may visit."""


@dataclass(frozen=True)
class SFTConfig:
    steps: int = 100
    """Adam steps of supervised warm start on reference solutions (0 = none)."""
    batch: int = 64
    lr: float = 3e-3


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 150
    """RL steps; each samples one rollout of prompts_per_step * group_size responses."""
    prompts_per_step: int = 8
    group_size: int = 8
    epochs: int = 2
    """Passes over each rollout; epochs > 1 reuses it off-policy (ratios leave 1)."""
    minibatches: int = 2
    """Optimizer steps per epoch; groups are split whole across minibatches."""
    lr: float = 1e-3
    optimizer: str = "adam"
    """adam or sgd (fixed across the arms of an experiment)."""
    temperature: float = 1.0
    max_response_len: int = 10
    eval_every: int = 10
    """Greedy accuracy and drift probes every this many steps (and after the last)."""
    eval_prompts: int = 64
    probe_prompts: int = 16
    """Fixed prompts whose reference solutions are the drift probes (2 per prompt)."""
    ckpt_every: int = 10
    measure_update_norm: bool = True
    """Parameter-space learning tax: one extra backward per minibatch."""
    measure_prop31: bool = True
    """On eval steps: Prop. 3.1's predicted KL of the step against the measured one
    (needs exchange.paramspace; one JVP and one forward)."""
    kl_target: float = 0.0
    """> 0: the KL-normalised step (exchange.lab.klstep): after each rollout's updates the
    whole parameter change is rescaled so that the mean KL on the control contexts
    (neither shared nor probe contexts) equals this; same optimiser and lr in both arms.
    0: off."""
    style_bonus: float = 0.0
    """Reward bonus for responses that contain S (0 = none). Only the pilot's sensitivity
    runs set it: the measured drift of log p(S) per unit of injected credit converts
    delta_hat into the forced-prefix certificate's bound (exchange.lab.certificate)."""
    common_rollouts: bool = False
    """Common rollouts for every arm of a seed (issue 31: arms that differ only in the
    mechanism): the baseline samples each step's rollout and stores it in its run
    directory (``rollouts/step<k>.pt``); every other arm of the seed (surgical,
    treatment, the pilot's sensitivity run) trains on those same tokens and rewards,
    with ``old_logprobs`` recomputed under its own policy (first-epoch ratios 1, as
    on-policy). Without it the arms sample from their own, diverging policies and their
    paired difference carries the sampling noise of two trajectories."""
    attribute: bool = False
    """Record the attribution instrument (exchange.lab.attribution) per step: the first-order
    change of the P2/P3 probes along the path (``attr/<probe>/path``) and the part the
    shared-event residual sent through the optimiser caused (``attr/<probe>/shared``)."""


@dataclass(frozen=True)
class Arm:
    name: str
    objective: str
    """An ``exchange.objectives.resolve`` spec: "grpo", "grpo+group_constant_norm", ..."""
    role: str
    """baseline (breaks (E)) or treatment (the restoring transformation)."""
    params: dict[str, Any] = field(default_factory=dict)
    keep: float | None = None
    """role dose only: the fraction of the shared residual kept, in (0, 1)."""
    dose_of: str | None = None
    """role dose only: what the fraction ``keep`` is of, set from the design's surgical arm
    (:func:`exchange.lab.dose.dose_family`): None, the whole shared residual (``+surgical``);
    ``"coupling_surgical"``, the coupling residual (``+coupling_surgical``, issue 42's M1)."""

    def loss_fn(self):
        try:
            fn = resolve(self.objective, **self.params)
        except ExchangeError as err:
            raise InvalidArgument(f"[[arms]] name={self.name!r} objective={self.objective!r}: {err}") from None
        if self.role == "dose":
            from exchange.lab.dose import dose_arm

            return dose_arm(self.objective, self.params, self.keep, self.dose_of, bound=fn)
        return fn


@dataclass(frozen=True)
class ExperimentConfig:
    name: str
    arms: tuple[Arm, ...]
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    pilot_seeds: tuple[int, ...] = ()
    """Seeds of the pilot (disjoint from ``seeds``): they freeze delta_hat, its sign and the
    paired SD (``pilot.json``) before the test seeds run (exchange.lab.pilot)."""
    description: str = ""
    mechanism: str = ""
    """The mechanism the pair toggles (M1..M8), for the report."""
    target_accuracy: float = 0.8
    """P4: samples needed to first reach this greedy accuracy."""
    task: TaskConfig = TaskConfig()
    model: ModelConfig = ModelConfig()
    sft: SFTConfig = SFTConfig()
    train: TrainConfig = TrainConfig()

    @property
    def baseline(self) -> Arm:
        return next(a for a in self.arms if a.role == "baseline")

    @property
    def treatment(self) -> Arm | None:
        return next((a for a in self.arms if a.role == "treatment"), None)

    @property
    def surgical(self) -> Arm | None:
        return next((a for a in self.arms if a.role == "surgical"), None)

    def runs(self, seeds: tuple[int, ...] | None = None) -> list["RunConfig"]:
        """One ``RunConfig`` per (seed, arm), seeds outermost so pairs finish together."""
        return [
            RunConfig(self.name, arm, seed, self.task, self.model, self.sft, self.train)
            for seed in (self.seeds if seeds is None else seeds)
            for arm in self.arms
        ]


@dataclass(frozen=True)
class RunConfig:
    """Everything one training run depends on (written to ``config.json``)."""

    experiment: str
    arm: Arm
    seed: int
    task: TaskConfig
    model: ModelConfig
    sft: SFTConfig
    train: TrainConfig

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint(self, *, extendable: bool = False, **engine: Any) -> str:
        """A short hash of the run: a run directory belongs to exactly one run. Both engines
        call it: the CPU trainer as ``fingerprint()``; the TRL run (exchange.lab.llm_run) on
        the run as TRL trains it, with ``engine`` (its model and data) and ``extendable``
        (``train.steps`` left out: a larger ``max_steps`` extends a finished TRL run). With
        neither, the hash is the one every recorded CPU run directory holds."""
        d = _stable(self.to_dict())
        if extendable:
            d["train"] = {**d["train"], "steps": None}
        if engine:
            d["engine"] = engine
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    def sft_key(self) -> str:
        """Runs that share this key share one warm-started model (both arms of a seed)."""
        key = _stable({"task": dataclasses.asdict(self.task), "model": dataclasses.asdict(self.model),
                       "sft": dataclasses.asdict(self.sft), "seed": self.seed})
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


_ADDED_LATER = {("task", "long_wrong"): False, ("task", "template_in_prompt"): False, ("task", "forced_style"): False,
                ("task", "probe_as_filler"): False, ("task", "fixed_answer"): False, ("task", "exact_filler"): False,
                ("arm", "keep"): None, ("arm", "dose_of"): None,
                ("train", "common_rollouts"): False}
"""Fields added after runs were recorded: at their default they leave the fingerprint and
the warm-start key out, so every earlier run directory and warm start stays valid."""


def _stable(d: dict[str, Any]) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in d.items()}
    for (section, key), default in _ADDED_LATER.items():
        if section in out and out[section].get(key, default) == default:
            out[section].pop(key, None)
    return out


# ------------------------------------------------------------------- parsing
def _section(cls, data: Any, where: str):
    if not isinstance(data, dict):
        raise InvalidArgument(f"{where}={data!r} is not a table; write it as [{where}] with key = value lines.")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise InvalidArgument(
            f"[{where}] has unknown key {unknown[0]}={data[unknown[0]]!r}; known keys: {', '.join(fields)}."
        )
    out = {}
    for key, value in data.items():
        default = fields[key].default
        if default is not dataclasses.MISSING and default is not None:
            ok = isinstance(value, type(default)) or (isinstance(default, float) and isinstance(value, int))
            if not ok or (isinstance(value, bool) and not isinstance(default, bool)):
                raise InvalidArgument(
                    f"[{where}] {key}={value!r} is a {type(value).__name__}; it must be a {type(default).__name__}."
                )
            if isinstance(default, float):
                value = float(value)
        out[key] = value
    return cls(**out)


def _positive(obj: Any, where: str, names: tuple[str, ...], minimum: int = 1) -> None:
    for name in names:
        if getattr(obj, name) < minimum:
            raise InvalidArgument(f"[{where}] {name}={getattr(obj, name)} must be >= {minimum}.")


def parse_experiment(data: dict[str, Any], source: str = "<config>") -> ExperimentConfig:
    """Validate a parsed TOML document (see the module docstring for the layout)."""
    top = {f.name for f in dataclasses.fields(ExperimentConfig)}
    unknown = sorted(set(data) - top)
    if unknown:
        raise InvalidArgument(f"{source}: unknown top-level key {unknown[0]}={data[unknown[0]]!r}; known: {', '.join(sorted(top))}.")
    if not isinstance(data.get("name"), str) or not data["name"]:
        raise InvalidArgument(f"{source}: name={data.get('name')!r} must be a non-empty string.")
    arms_raw = data.get("arms")
    n_dose = sum(isinstance(a, dict) and a.get("role") == "dose" for a in arms_raw) if isinstance(arms_raw, list) else 0
    if not isinstance(arms_raw, list) or len(arms_raw) - n_dose not in (2, 3):
        n = len(arms_raw) if isinstance(arms_raw, list) else arms_raw
        raise InvalidArgument(
            f"{source}: arms={n!r}; an experiment has two or three [[arms]] tables: role = \"baseline\" and "
            "role = \"surgical\" and/or role = \"treatment\" (plus any role = \"dose\" arms)."
        )
    arms = []
    for i, raw in enumerate(arms_raw):
        arm = _section(Arm, raw, f"arms.{i}") if all(k in raw for k in ("name", "objective", "role")) else None
        if arm is None:
            raise InvalidArgument(f"{source}: [[arms]] #{i} needs name, objective and role (got keys {sorted(raw)}).")
        if arm.role not in ROLES:
            raise InvalidArgument(f"{source}: [[arms]] name={arm.name!r} role={arm.role!r}; choose one of {ROLES}.")
        if not isinstance(arm.params, dict):
            raise InvalidArgument(f"{source}: [[arms]] name={arm.name!r} params={arm.params!r} must be a table.")
        arm.loss_fn()  # resolve now: a bad spec fails before any training
        arms.append(arm)
    roles = [a.role for a in arms if a.role != "dose"]
    if roles.count("baseline") != 1 or len(set(roles)) != len(roles):
        raise InvalidArgument(f"{source}: arm roles={roles}; need one baseline and at most one of each other role.")
    if len({a.name for a in arms}) != len(arms):
        raise InvalidArgument(f"{source}: arm names={[a.name for a in arms]} repeat; give the arms distinct names.")
    surg = next((a for a in arms if a.role == "surgical"), None)
    base = next(a for a in arms if a.role == "baseline")
    # the pathway arm: the baseline's objective with its whole shared residual removed (+surgical), or only
    # the part its unequal per-response weights add (+coupling_surgical, issue 42's M1 design)
    pathway = (f"{base.objective}+surgical", f"{base.objective}+coupling_surgical")
    if surg is not None and (surg.objective not in pathway or surg.params != base.params):
        raise InvalidArgument(
            f"{source}: [[arms]] name={surg.name!r} role=\"surgical\" objective={surg.objective!r}; it must be the "
            f"baseline's objective with +surgical (or +coupling_surgical) and the same params: objective = "
            f"\"{base.objective}+surgical\"."
        )
    doses = [a for a in arms if a.role == "dose"]
    for a in doses:
        if a.objective != base.objective or a.params != base.params or a.keep is None or not 0 < a.keep < 1:
            raise InvalidArgument(
                f"{source}: [[arms]] name={a.name!r} role=\"dose\" objective={a.objective!r} keep={a.keep!r}; a dose "
                f"arm is the baseline's objective (objective = \"{base.objective}\", same params) with 0 < keep < 1.")
    if doses and surg is None:
        raise InvalidArgument(f"{source}: dose arms {[a.name for a in doses]} need a role = \"surgical\" arm (keep = 0).")
    if doses:  # a dose keeps a fraction of what THIS design's surgical arm removes (exchange.lab.dose.dose_family)
        from exchange.lab.dose import dose_family

        family = dose_family(base.objective, surg.objective)
        for i, a in enumerate(arms):
            if a.role == "dose" and a.dose_of not in (None, family):
                raise InvalidArgument(
                    f"{source}: [[arms]] name={a.name!r} dose_of={a.dose_of!r}, but the surgical arm "
                    f"{surg.name!r} is {surg.objective!r}: a dose keeps a fraction of what that arm removes; drop "
                    "dose_of (it is set from the surgical arm).")
            if a.role == "dose":
                arms[i] = dataclasses.replace(a, dose_of=family)
    if len({a.keep for a in doses}) != len(doses):
        raise InvalidArgument(f"{source}: dose arms repeat a keep value {[a.keep for a in doses]}.")
    for a in arms:
        for name in ("keep", "dose_of"):  # the dose arms' own fields
            if a.role != "dose" and getattr(a, name) is not None:
                raise InvalidArgument(f"{source}: [[arms]] name={a.name!r} role={a.role!r} "
                                      f"{name}={getattr(a, name)!r}: {name} is for role = \"dose\" arms only.")
    pilot = data.get("pilot_seeds", [])
    if not isinstance(pilot, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in pilot):
        raise InvalidArgument(f"{source}: pilot_seeds={pilot!r} must be a list of integers.")
    if pilot and len(pilot) < 2:
        raise InvalidArgument(f"{source}: pilot_seeds={pilot!r}: a pilot needs >= 2 seeds (its paired SD).")
    seeds = data.get("seeds", [0, 1, 2, 3, 4])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise InvalidArgument(f"{source}: seeds={seeds!r} must be a non-empty list of integers.")
    if len(set(seeds)) != len(seeds):
        raise InvalidArgument(f"{source}: seeds={seeds!r} has duplicates.")
    if set(seeds) & set(pilot):
        raise InvalidArgument(f"{source}: pilot_seeds {sorted(set(seeds) & set(pilot))} are also test seeds; "
                              "the test must not use the seeds that froze delta_hat.")
    cfg = ExperimentConfig(
        name=data["name"],
        arms=tuple(arms),
        seeds=tuple(seeds),
        pilot_seeds=tuple(pilot),
        description=str(data.get("description", "")),
        mechanism=str(data.get("mechanism", "")),
        target_accuracy=float(data.get("target_accuracy", 0.8)),
        task=_section(TaskConfig, data.get("task", {}), "task"),
        model=_section(ModelConfig, data.get("model", {}), "model"),
        sft=_section(SFTConfig, data.get("sft", {}), "sft"),
        train=_section(TrainConfig, data.get("train", {}), "train"),
    )
    if cfg.task.name not in TASKS:
        raise InvalidArgument(f"{source}: [task] name={cfg.task.name!r}; choose one of: {', '.join(TASKS)}.")
    _positive(cfg.train, "train", ("steps", "prompts_per_step", "epochs", "minibatches", "eval_every",
                                   "eval_prompts", "probe_prompts", "ckpt_every", "max_response_len"))
    _positive(cfg.train, "train", ("group_size",), minimum=2)
    _positive(cfg.model, "model", ("d_model", "n_heads", "n_layers"))
    _positive(cfg.sft, "sft", ("steps",), minimum=0)
    if cfg.train.minibatches > cfg.train.prompts_per_step:
        raise InvalidArgument(
            f"{source}: [train] minibatches={cfg.train.minibatches} > prompts_per_step={cfg.train.prompts_per_step}; "
            "groups are never split, so use at most one minibatch per prompt."
        )

    need = cfg.task.build().max_response_len
    if cfg.train.max_response_len < need:
        raise InvalidArgument(
            f"{source}: [train] max_response_len={cfg.train.max_response_len} < {need}, the longest grammatical "
            f"response (template, S, max_filler={cfg.task.max_filler} fillers, answer, EOS); zero-credit tokens "
            "could then cause truncation and carry credit. Raise it or lower max_filler."
        )
    if cfg.model.kind not in ("transformer", "tabular"):
        raise InvalidArgument(f"{source}: [model] kind={cfg.model.kind!r}; choose transformer or tabular.")
    if cfg.train.kl_target < 0:
        raise InvalidArgument(f"{source}: [train] kl_target={cfg.train.kl_target} must be >= 0 (0 = off).")
    if cfg.train.optimizer not in ("adam", "sgd"):
        raise InvalidArgument(f"{source}: [train] optimizer={cfg.train.optimizer!r}; choose adam or sgd.")
    if not 0.0 <= cfg.target_accuracy <= 1.0:
        raise InvalidArgument(f"{source}: target_accuracy={cfg.target_accuracy} must lie in [0, 1].")
    return cfg


def load_experiment(path: str | Path) -> ExperimentConfig:
    """Read and validate an experiment TOML file."""
    import tomllib

    path = Path(path)
    if not path.is_file():
        raise InvalidArgument(f"config={str(path)!r} is not a file; pass a path such as experiments/configs/grpo_norm.toml.")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise InvalidArgument(f"config={str(path)!r} is not valid TOML: {err}.") from None
    return parse_experiment(data, source=str(path))

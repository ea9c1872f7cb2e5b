"""``exchange check TARGET``: verdict table, minimal counterexamples, mechanisms."""

from __future__ import annotations

from exchange.cli.options import REGIME_CHOICES, add_json, add_params, add_shrink, regimes_of


def add_parser(sub) -> None:
    p = sub.add_parser(
        "check",
        help="check one objective for exchangeability and cancellation",
        description="TARGET: a built-in name (see `exchange list`, transformations with +), "
        "trl:/verl:/openrlhf:/skyrl:/areal:/art: library losses, module:function, or path/to/file.py:function. "
        "Or, instead of TARGET, --trl-config recipe.yaml: the loss that TRL recipe trains with.",
    )
    p.add_argument("target", metavar="TARGET", nargs="?")
    p.add_argument(
        "--trl-config", metavar="RECIPE.yaml", dest="trl_config",
        help="audit the loss a TRL GRPO recipe trains with (GRPOConfig fields in YAML, as `trl grpo --config` "
        "reads; loss_type and every loss setting): the same check as trl:<loss_type> with those parameters",
    )
    p.add_argument(
        "--verl-config", metavar=("FILE.yaml", "KEY=VALUE"), nargs="+", dest="verl_config",
        help="audit one optimizer step of a verl config: verl 0.9.1's generated default, FILE.yaml (use - for none) "
        "and verl command-line overrides (key=value, +key=value); the loss with every setting, the mini-batch "
        "schedule (M8 where groups are split over steps), and what is present outside the coefficients",
    )
    add_params(p)
    p.add_argument("--property", action="append", dest="properties", metavar="NAME", help="check only these (repeatable)")
    p.add_argument("--regime", choices=sorted(REGIME_CHOICES), default="both", help="on-policy, off-policy or both")
    p.add_argument("--max-examples", type=int, default=200, help="fuzzed configurations per property and regime (at least; generated in bulk, Hypothesis shrinks a failure)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="time limit for one call of the loss")
    p.add_argument(
        "--hypothesis-profile",
        metavar="NAME",
        help="use this registered Hypothesis settings profile (max_examples, database, ...) for the fuzzing",
    )
    p.add_argument(
        "--precision",
        choices=("auto", "float64", "float32", "bf16"),
        default="auto",
        help="the precision the loss runs in (auto: its exchange_precision attribute, else detected from its "
        "coefficients). Verdicts come from the loss's float64 twin (every lower-precision dtype request "
        "rewritten to float64); below float64 the loss is also evaluated beside its twin: within the round-off "
        "its float32 twin predicts for this precision the twin's verdict stands (a twin break below this "
        "precision's resolution reads 'holds up to <precision> round-off'), beyond it the loss itself is "
        "judged and a break its twin lacks is 'BROKEN (precision-induced)'. An incomplete twin (a "
        "low-precision tensor reaching an op) judges the loss at this precision against one noise floor. "
        "float64: the loss's own round-off counts as a break (only the measured float64 floor is allowed)",
    )
    p.add_argument(
        "--regularizer",
        metavar="TARGET",
        help="a KL/entropy/penalty term (module:function or file.py:function), reported in its own channel "
        "instead of the reward-driven coefficients (an M6 term belongs here)",
    )
    add_shrink(p, default=True)
    add_json(p)
    p.add_argument("--verbose", "-v", action="store_true", help="also print counterexamples as pasteable code")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (drawn on stderr only on a terminal, never with --json)")
    p.set_defaults(func=run)


def run(args) -> int:
    from exchange.errors import InvalidArgument
    from exchange.targets import parse_param_items, resolve_target

    verl = getattr(args, "verl_config", None)
    if (args.target is None) + (args.trl_config is None) + (verl is None) != 2:
        raise InvalidArgument("give either TARGET, --trl-config RECIPE.yaml or --verl-config FILE.yaml (exactly one); "
                              "see exchange check --help")
    if verl is not None:
        if args.param:
            raise InvalidArgument("--param does not apply with --verl-config; give verl's key=value after the file.")
        return _check_verl(args, verl)
    if args.trl_config is not None:
        if args.param:
            raise InvalidArgument("--param does not apply with --trl-config; put the setting in the recipe.")
        targets = recipe_targets(args.trl_config)
    else:
        targets = [resolve_target(args.target, parse_param_items(args.param))]
    code = 0
    for target in targets:
        derived = _recipe_mechanisms(args, target)
        if derived:  # beside the loss's report: what the recipe's settings derive (M8 included)
            args.json_extra = {"trl_config": {"mechanisms": [
                {"mechanism": m, "regimes": r, "cause": line} for m, r, line in derived]}}
        code = max(code, _check_one(args, target))
        if derived and not args.json:
            print("\nMechanisms the recipe's settings derive (THEORY.md section 4; M8 is the schedule's, which the "
                  "check above names only where the loss declares its step's rows):")
            for mechanism, regimes, line in derived:
                print(f"  {mechanism} ({regimes}): {line}")
    return code


def _recipe_mechanisms(args, target) -> list:
    """A TRL recipe's mechanisms as its settings derive them (``exchange.libraries.trl.
    recipe.recipe_mechanisms``): the checker fuzzes one loss and cannot see the schedule
    (M8) nor which setting made a weight; the audit knows both."""
    if args.trl_config is None or target.source != "trl":
        return []
    from exchange.libraries.trl.recipe import load_config, recipe_mechanisms

    return recipe_mechanisms(load_config(args.trl_config))


def recipe_targets(path: str) -> list:
    """What a recipe trains, as targets: a TRL recipe, ``trl:<loss_type>`` with every loss
    setting; a run_llm.py recipe (it names an ``experiment``), each arm's exchange
    objective bound as ``ExchangeGRPOTrainer`` binds it from the recipe's GRPOConfig."""
    from pathlib import Path

    from exchange.errors import InvalidArgument
    from exchange.libraries.trl.recipe import (
        config_target,
        loss_of_config,
        parse_recipe,
        present_regularizers,
        sampler_notes,
    )
    from exchange.targets import Target

    config, data = parse_recipe(path)
    present = "".join(f"; {note}" for note in present_regularizers(config) + sampler_notes(config))
    if "experiment" not in data:
        from exchange.libraries.trl.recipe import schedule_note

        lib_target, _ = config_target(config)
        step = schedule_note(config)
        present = f"; {step}{present}" if step else present
        return [Target(f"{lib_target} (from {path}{present})", loss_of_config(config), source="trl")]
    from exchange.lab.config import load_experiment
    from exchange.libraries.trl.settings import config_params, refused_settings
    from exchange.libraries.trl.objective import resolve_objective

    experiment = Path(str(data["experiment"]))
    if not experiment.is_file() and (Path(path).parent / experiment).is_file():
        experiment = Path(path).parent / experiment
    out = []
    for arm in load_experiment(experiment).arms:
        # as run_llm's trainer binds it: the arm's own clip widths unless the recipe sets them
        refused = refused_settings(config, arm.objective, arm.params or None, trl_defaults=False)
        if refused:
            raise InvalidArgument(f"--trl-config {path}: arm {arm.name!r} (objective={arm.objective!r}) cannot "
                                  "apply GRPOConfig." + "; GRPOConfig.".join(refused) + ".")
        params = config_params(config, arm.objective, arm.params or None, trl_defaults=False)
        out.append(Target(f"{arm.objective} (arm {arm.name!r} of {path}, as ExchangeGRPOTrainer binds it{present})",
                          resolve_objective(arm.objective, params), source="catalog"))
    return out


def _check_verl(args, items: list[str]) -> int:
    """``--verl-config FILE.yaml [key=value ...]``: the loss of one optimizer step checked,
    then the schedule (M8) and what is present outside the coefficients; exit 1 when the
    step breaks a property (M8 included)."""
    from exchange.libraries.verl.config import load_config
    from exchange.libraries.verl.recipe import read_recipe
    from exchange.targets import resolve_target

    path = None if items[0] == "-" else items[0]
    recipe = read_recipe(load_config(path, items[1:]))
    target = resolve_target(recipe.target, recipe.params)
    target.name = f"{target.name} (from --verl-config {' '.join(items)})"
    schedule = recipe.schedule.describe()
    args.json_extra = {"verl_config": {**recipe.to_dict(), "step": schedule}}
    code = _check_one(args, target)
    if not args.json:
        print(f"\nOne optimizer step: {schedule}")
        if recipe.kl_note:
            print(f"KL: {recipe.kl_note}")
        for line in recipe.present:
            print(f"Present: {line}")
    return max(code, 1 if recipe.schedule.split else 0)


def _check_one(args, target) -> int:
    import json

    from rich.console import Console

    from exchange.checker import check
    from exchange.cli.progress import check_progress
    from exchange.targets import resolve_target

    regularizer = target.regularizer
    if args.regularizer:
        regularizer = resolve_target(args.regularizer).loss_fn
    # The bar (stderr, a terminal only, erased at the end) never reaches --json's stdout.
    with check_progress(not (args.json or args.no_progress)) as progress:
        report = check(
            target.loss_fn,
            properties=args.properties,
            max_examples=args.max_examples,
            seed=args.seed,
            regimes=regimes_of(args.regime),
            regularizer=regularizer,
            precision=None if args.precision == "auto" else args.precision,
            timeout=args.timeout,
            hypothesis_profile=args.hypothesis_profile,
            progress=progress,
            name=target.name,
            shrink=args.shrink,
        )
    params = "".join(f" --param {p}" for p in args.param or [])
    regime = "" if args.regime == "both" else f" --regime {args.regime}"
    what = args.target if args.trl_config is None else f"--trl-config {args.trl_config}"
    if getattr(args, "verl_config", None) is not None:
        what = "--verl-config " + " ".join(args.verl_config)
    reg = f" --regularizer {args.regularizer}" if args.regularizer else ""
    reg += f" --precision {args.precision}" if args.precision != "auto" else ""
    report.reproduce = f"exchange check {what}{params}{reg}{regime} --seed {args.seed} --max-examples {args.max_examples}" + " --no-shrink" * (not args.shrink)
    if args.json:
        extra = getattr(args, "json_extra", None)  # --verl-config: the schedule beside the loss's report
        print(report.to_json() if extra is None else json.dumps({**report.to_dict(), **extra}, indent=2))
    else:
        report.render(Console(width=max(Console().width, 120)), verbose=args.verbose)
    return 0 if report.all_hold else 1

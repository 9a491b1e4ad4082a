"""`otel-safety eval`: the detectors measured on labelled data."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from otel_safety import detectors as detector_registry
from otel_safety.calibration.file import in_use
from otel_safety.commands.options import add_db, add_detectors, add_format, detector_keys
from otel_safety.commands.stores import check_replaceable, replace_store
from otel_safety.config import Settings
from otel_safety.evaluation.datasets import EXTERNAL
from otel_safety.exporters.duckdb import mark_store
from otel_safety.extras import install_hint

EVAL_DB = "otel-safety-eval.duckdb"
EVAL_COMMAND = "otel-safety eval"
# What a user adds to eval's store (a reviewer's labels beside the datasets', resolutions),
# named when a re-run replaces it.
ADDED_BY_HAND = {
    "labels": "source NOT LIKE 'external:%' AND source NOT LIKE 'synthetic%'",
    "resolutions": "true",
}
EVAL_MARK = "otel-safety eval"
DATASET_NAMES = (*EXTERNAL, "synthetic")


def add_commands(sub: argparse._SubParsersAction) -> None:
    evaluate = sub.add_parser(
        "eval",
        help="measure the detectors on labelled data",
        description="Turn every usable row of the labelled datasets (XSTest, JailbreakBench, "
        "AgentDojo, AgentDojo's attacked runs rewritten in its other attack strings, BIPIA, "
        "jailbreak prompts versus benign requests, AgentHarm tasks as constructed agent runs) "
        "and our synthetic sets "
        "into GenAI spans, run them through the same pipeline as live traffic, store findings "
        "and labels, and print precision, recall and F1 with 95% bootstrap intervals and the "
        "always-fire baseline, per detector and dataset. Synthetic rows are reported apart.",
    )
    evaluate.add_argument(
        "--data",
        default="../shared/data",
        help="folder of the labelled datasets (default ../shared/data)",
    )
    add_db(
        evaluate,
        default=EVAL_DB,
        help=f"store to write, replaced on every run (default {EVAL_DB}); a file that "
        "`eval` did not make is never touched",
    )
    evaluate.add_argument(
        "--datasets",
        help="comma-separated subset: " + ", ".join(DATASET_NAMES),
    )
    add_detectors(evaluate, "comma-separated detector keys (default: all)")
    evaluate.add_argument(
        "--sample",
        type=_positive,
        metavar="N",
        help="only N rows per dataset, the same ones on every run",
    )
    evaluate.add_argument(
        "--resamples", type=_positive, default=1000, help="bootstrap resamples (default 1000)"
    )
    evaluate.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    evaluate.add_argument(
        "--in-sample",
        action="store_true",
        help="skip the out-of-sample pass (refitting each learned judge without the group "
        "being scored, which needs the train extra) and report the packaged judges' figures",
    )
    add_format(evaluate, ("table", "json", "markdown"), "output format (default: table)")
    evaluate.add_argument(
        "--deep",
        action="store_true",
        help="also send the agent-trajectory rows (agentdojo) to the deep analysis model "
        "(OTEL_SAFETY_DEEP_BASE_URL or OPENAI_BASE_URL, OTEL_SAFETY_DEEP_MODEL) and print its "
        "figures beside the rule tier's, with its cost per 1,000 traces; this sends those "
        "rows' content to that endpoint",
    )
    evaluate.add_argument(
        "--deep-model", help="model name for --deep (default: OTEL_SAFETY_DEEP_MODEL)"
    )
    evaluate.set_defaults(handler=cmd_eval)


def _stderr_line(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_eval(args: argparse.Namespace) -> int:
    import json

    from otel_safety.evaluation import datasets
    from otel_safety.evaluation.held_out import HeldOutJudges, training_available
    from otel_safety.evaluation.runner import run_eval

    detectors = detector_keys(args.detectors)
    detector_registry.check(detectors)  # fail before reading data or making a store
    datasets.check_folder(Path(args.data))  # before asking for anything to be installed
    names = [name.strip() for name in (args.datasets or "").split(",") if name.strip()] or None
    if args.datasets is not None and names is None:
        raise datasets.DataError(
            f"--datasets {args.datasets!r} names no dataset; known: {', '.join(DATASET_NAMES)}"
        )
    datasets.check_names(names)  # a typo is named before anything is asked to be installed
    if not args.in_sample and not training_available():
        print(
            "eval: the out-of-sample figures refit the learned judges, which needs "
            f"scikit-learn: {install_hint('train')} (or pass --in-sample)",
            file=sys.stderr,
        )
        return 2
    deep = None
    if args.deep:
        from otel_safety.deep.settings import deep_config

        deep = {"deep_model": args.deep_model}
        deep_config(Settings.resolve(deep=True, **deep))  # no endpoint: say so before any work
    elif args.deep_model:
        raise ValueError("--deep-model is for --deep")
    held_out = None
    if not args.in_sample:
        held_out = HeldOutJudges(Path(args.data), _stderr_line)
        held_out.check_training_rows()  # a partial folder fails here, not after the first pass
    target = Path(args.db)
    if target.exists():  # before the data is read: a store not ours is refused at once
        check_replaceable(target, EVAL_MARK, EVAL_COMMAND)
    made = target.with_name(f".{target.name}.partial")  # the old store stays until done
    made.unlink(missing_ok=True)
    Path(f"{made}.wal").unlink(missing_ok=True)
    cases = datasets.load(Path(args.data), names)
    if args.sample:
        cases = datasets.sample(cases, args.sample)
    print(f"eval: {len(cases)} cases from {args.data}", file=sys.stderr)
    settings = Settings.resolve(detectors=detectors)
    if settings.calibration:  # the figures are then those of its thresholds
        keys = detector_registry.check(settings.detectors, settings.thresholds)
        print(f"eval: {in_use(settings.calibration, keys, settings.thresholds)}", file=sys.stderr)
    report = run_eval(
        cases,
        str(made),
        detectors=detectors,
        resamples=args.resamples,
        seed=args.seed,
        progress=sys.stderr,
        sampled=args.sample,
        held_out=held_out,
        deep=deep,
    )
    report.settings, report.departures = _settings(args, names, detectors, settings)
    mark_store(str(made), EVAL_MARK)
    replace_store(made, target, EVAL_MARK, EVAL_COMMAND, ADDED_BY_HAND)
    report.db_path = str(target)  # where the store is now, not where it was made
    if not report.rows:
        print(
            "eval: no row of these datasets is labelled for these detectors; see the "
            "README's evaluation section for which dataset labels which detector",
            file=sys.stderr,
        )
    if args.format == "json":
        print(json.dumps(report.as_dict(), indent=2))
    elif args.format == "markdown":
        print(report.markdown())
    else:
        if report.departures:  # above the table: a figure read without it reads as the headline
            print(f"Not the default run: {'; '.join(report.departures)}.\n")
        print(report.table())
        if report.escalation:
            print("\nThe escalation ladder on agent runs:")
            for figures in report.escalation:
                print(figures.text())
        print("\nWhere a dataset has no label for a detector, how often it fires anyway:")
        print(report.firing_table())
        if report.deep is not None:
            print(f"\n{report.deep.heading()}")
            print(report.deep.text())
        print(
            f"\n{report.cases} cases in {report.seconds:.0f}s; findings and labels in "
            f"{args.db}{_STORE_NOTE if held_out is not None else ''}. Intervals: 95% "
            f"bootstrap, {args.resamples} resamples, seed {args.seed}."
        )
    return 0


# The store keeps the first pass, judged by the packaged judges: queries over it (`report`,
# `confusion_matrix`) give in-sample figures, which must not be read as the ones above.
_STORE_NOTE = (
    " (as the packaged judges found them: in-sample, so queries over it, `report` and "
    "`calibrate` read higher than the out-of-sample figures above)"
)


def _settings(
    args: argparse.Namespace,
    datasets: list[str] | None,
    detectors: list[str] | None,
    settings: Settings,
) -> tuple[dict[str, Any], list[str]]:
    """What the figures were measured with, and in words what differs from a default run:
    a figure quoted without them (in-sample judges, a calibration's thresholds, a sample)
    reads as the headline one."""
    recorded: dict[str, Any] = {
        "data": str(Path(args.data).resolve()),
        "datasets": datasets or "all",
        "detectors": detectors or "all",
        "sample_per_dataset": args.sample,
        "judges": "packaged (in-sample)" if args.in_sample else "refit without each group",
        "calibration": str(Path(settings.calibration).resolve()) if settings.calibration else None,
        "thresholds": dict(settings.thresholds),
        "deep_model": (args.deep_model or settings.deep_model) if args.deep else None,
    }
    departures = []
    if args.in_sample:
        departures.append("in-sample: the packaged judges score the rows they were fitted on")
    if settings.calibration:
        departures.append(f"thresholds from the calibration {recorded['calibration']}")
    if settings.thresholds:
        listed = ", ".join(f"{k}={v}" for k, v in sorted(settings.thresholds.items()))
        departures.append(f"thresholds set by hand ({listed})")
    if args.sample:
        departures.append(f"{args.sample} rows per dataset (--sample)")
    if datasets:
        departures.append(f"datasets {', '.join(datasets)} only")
    if detectors:
        departures.append(f"detectors {', '.join(detectors)} only")
    return recorded, departures


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value

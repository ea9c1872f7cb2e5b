"""Publish issue 42's designs: report each run directory, copy its typed results into
experiments/results/<name>/ (pilot.json, summary.json, summary.md) and render them into
their own generated sections of docs/experiments.md and docs/claims.md. Runs that form a
dose series (a base config's run and its doses from experiments/dose_response.py, which
record their base config) also get the series' section and claims row
(exchange.lab.experiment_report_series).

    python experiments/publish.py runs/grpo_norm__probe_dose_adam runs/grpo_norm__probe_dose_sgd \
        runs/gspo_equal_length_reuse runs/gspo_equal_length_reuse__reuse4 \
        runs/gspo_equal_length_reuse__reuse8 runs/dapo_sign_free_clip__epslow_cd_e4_l01_kl0 \
        runs/dapo_sign_free_clip__epslow_cd_e4_l01_kl0__sgd runs/gspo_equal_length_nonprivate__e4x2__e2x2 \
        runs/gspo_equal_length_nonprivate__e4x2

Pass every published directory (tests/lab/test_one_runner.py's PUBLISHED): the ISSUE42
sections are rewritten from the directories passed, so one left out disappears. The sections
have their own markers (``ISSUE42``); the earlier designs' generated sections are written by
``exchange experiment report <their dirs> --markdown ... --claims ...`` (docs/experiments.md,
"Results (CPU)"; tests/lab/test_one_runner.py's EARLIER).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from exchange.lab.experiment_report import _markdown, claims_rows, replace_section, report_experiment, series_sections

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- BEGIN GENERATED RESULTS ISSUE42 -->", "<!-- END GENERATED RESULTS ISSUE42 -->"
CLAIMS_BEGIN, CLAIMS_END = "<!-- BEGIN GENERATED CLAIMS ISSUE42 -->", "<!-- END GENERATED CLAIMS ISSUE42 -->"


def main(dirs: list[str]) -> int:
    results = []
    for d in map(Path, dirs):
        res = report_experiment(d)
        dest = ROOT / "experiments" / "results" / res.meta["name"]
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("pilot.json", "summary.json", "summary.md"):
            shutil.copyfile(d / name, dest / name)
        results.append(res)
        print(f"{res.meta['name']}: " + ", ".join(f"{k} {res.verdict(k)}" for k in ("P1", "P2", "P3", "P4")))
    write_sections(results, ROOT / "docs")
    return 0


def write_sections(results, docs: Path) -> None:
    """The ISSUE42 sections of ``docs/experiments.md`` and ``docs/claims.md`` from ``results``
    (tests/lab/test_one_runner.py regenerates them from the local run directories and
    compares them byte for byte with the committed pages)."""
    sections = [_markdown(r, "").replace(f"![{r.meta['name']} curves](exp_{r.meta['name']}_curves.png)", "")
                for r in results]
    replace_section(docs / "experiments.md", BEGIN, END, "\n".join(sections).rstrip() + "\n\n" + series_sections(results))
    replace_section(docs / "claims.md", CLAIMS_BEGIN, CLAIMS_END, claims_rows(results))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

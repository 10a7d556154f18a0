"""Render calibration and gate results: a terminal table, Markdown, confusion-matrix PNGs.

Rendering only; the command writes the files. Undefined figures print as
``n/a`` (JSON keeps them ``null``), never as NaN.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.table import Table

from sidecar.calibrate.agreement import CalibrationReport, CriterionReport, Part
from sidecar.calibrate.release_gate import GateReport
from sidecar.terminal import plain, styled, warning_line, yes_no

# Unresolved disagreements listed per criterion in Markdown; the JSON has all.
MARKDOWN_DISAGREEMENTS = 20


def fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _title(part: Part) -> str:
    return {
        Part.ALL: "all cases",
        Part.CALIBRATION: "calibration part",
        Part.HELD_OUT: "held-out part",
    }[part]


def calibration_table(report: CalibrationReport, part: Part) -> Table:
    table = Table(
        title=f"Judge vs humans ({_title(part)})",
        title_justify="left",
        caption="FP = false pass (judge PASS, humans FAIL); FN = false fail (judge FAIL, humans PASS)",
        caption_justify="left",
    )
    for header in ("criterion", "judge", "n", "kappa", "agree", "bal.acc", "bal.F1"):
        table.add_column(header, justify="left" if header in ("criterion", "judge") else "right")
    for header in ("TP", "FP", "FN", "TN", "ERROR", "raters κ", "fit"):
        table.add_column(header, justify="right")
    for row in report.rows:
        if row.part != part:
            continue
        c = row.confusion
        table.add_row(
            plain(row.criterion),
            plain(row.judge_model),
            str(c.n),
            fmt(c.kappa),
            fmt(c.agreement),
            fmt(c.balanced_accuracy),
            fmt(c.balanced_f1),
            str(c.tp),
            str(c.fp),
            str(c.fn),
            str(c.tn),
            str(row.errors),
            fmt(row.inter_rater.kappa),
            yes_no(row.fit_to_gate),
        )
    return table


def print_calibration(report: CalibrationReport, console: Console) -> None:
    for part in report.parts:
        console.print(calibration_table(report, part))
    for row in report.rows:
        if row.part == report.decisive_part:
            for note in row.notes:
                console.print(plain(f"  {row.criterion} ({row.judge_model}): {note}"))
    for warning in report.warnings:
        console.print(warning_line(warning))


def print_gate(report: GateReport, console: Console) -> None:
    table = Table(title="Gated criteria", title_justify="left")
    for header in (
        "rubric",
        "criterion",
        "gate",
        "n",
        "passes",
        "pass rate",
        "lower bound",
        "min",
        "ERROR",
        "ok",
    ):
        table.add_column(header, justify="left" if header in ("rubric", "criterion") else "right")
    for c in report.criteria:
        table.add_row(
            plain(c.rubric_id),
            plain(c.criterion),
            "yes" if c.gate else "advisory",
            str(c.tally.n),
            str(c.tally.passes),
            fmt(c.pass_rate),
            fmt(c.lower_bound),
            fmt(c.threshold, 2),
            str(c.tally.errors),
            yes_no(c.passed),
        )
    console.print(table)
    checks = Table(title="Checks", title_justify="left")
    for header in ("rubric", "check", "gate", "FAIL", "PASS", "ERROR", "ok"):
        checks.add_column(header, justify="left" if header in ("rubric", "check") else "right")
    for k in report.checks:
        checks.add_row(
            plain(k.rubric_id),
            plain(k.check),
            "yes" if k.gate else "advisory",
            str(k.tally.fails),
            str(k.tally.passes),
            str(k.tally.errors),
            yes_no(k.passed),
        )
    if report.checks:
        console.print(checks)
    if report.held_for_review:
        console.print(
            plain(
                f"{report.held_for_review} injection-suspected PASS held for review"
                " (not counted as passes until reviewed)"
            )
        )
    console.print(
        plain(
            f"ERROR rate {fmt(report.error_rate)} ({report.gating_errors}/{report.gating_results} gating results), "
            f"{report.cases} cases"
        )
    )
    if report.passed:
        console.print(styled("gate passed", "green"))
    else:
        console.print(styled("gate failed:", "red"))
        for reason in report.reasons:
            console.print(plain(f"  - {reason}"))


# -- pictures ----------------------------------------------------------------


def image_name(row: CriterionReport) -> str:
    raw = f"confusion-{row.part.value}-{row.rubric_id}-{row.judge_model}-{row.criterion}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", raw) + ".png"


REPORT_EXTRA_MISSING = (
    "--report draws confusion matrices with matplotlib, which is not installed: "
    "install the report extra (pip install 'sidecar-eval[report]') or leave out --report"
)


def pictures_available() -> bool:
    """Whether matplotlib (the optional ``report`` extra) can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def confusion_png(row: CriterionReport) -> bytes:
    """A 2x2 confusion matrix picture (humans in rows, judge in columns)."""
    # Imported here: only --report needs matplotlib, and it is slow to import.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    c = row.confusion
    cells = [[c.tp, c.fn], [c.fp, c.tn]]
    names = [["true pass", "false fail"], ["false pass", "true fail"]]
    # The Figure API without pyplot keeps no global state (Agg canvas, no display).
    figure = Figure(figsize=(4.2, 3.6), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.imshow(cells, cmap="Blues", vmin=0, vmax=max(1, *cells[0], *cells[1]))
    axes.set_xticks([0, 1], labels=["PASS", "FAIL"])
    axes.set_yticks([0, 1], labels=["PASS", "FAIL"])
    axes.set_xlabel("judge")
    axes.set_ylabel("humans")
    top = max(1, *cells[0], *cells[1])
    for i in range(2):
        for j in range(2):
            colour = "white" if cells[i][j] > top / 2 else "black"
            axes.text(j, i, f"{cells[i][j]}\n{names[i][j]}", ha="center", va="center", color=colour)
    axes.set_title(
        f"{row.criterion} · {row.judge_model}\nkappa {fmt(c.kappa)}, n {c.n}", fontsize=10
    )
    figure.tight_layout()
    buffer = io.BytesIO()
    # No "Software" metadata: the same figures give the same bytes, fit for a commit.
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


# -- Markdown ----------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _summary(report: CalibrationReport, part: Part) -> list[str]:
    lines = [
        "| criterion | judge | rubric | n | kappa | agreement | balanced accuracy | balanced F1 "
        "| TP | false pass (FP) | false fail (FN) | TN | judge ERRORs | inter-rater kappa | fit to gate |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for row in report.rows:
        if row.part != part:
            continue
        c = row.confusion
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{_cell(row.criterion)}`",
                    _cell(row.judge_model),
                    _cell(f"{row.rubric_id} v{row.rubric_version}"),
                    str(c.n),
                    fmt(c.kappa, 4),
                    fmt(c.agreement, 4),
                    fmt(c.balanced_accuracy, 4),
                    fmt(c.balanced_f1, 4),
                    str(c.tp),
                    str(c.fp),
                    str(c.fn),
                    str(c.tn),
                    str(row.errors),
                    fmt(row.inter_rater.kappa, 4),
                    "yes" if row.fit_to_gate else "**no**",
                ]
            )
            + " |"
        )
    return lines


def _details(row: CriterionReport, image: str | None) -> list[str]:
    lines = [f"### `{row.criterion}` · {row.judge_model} · {_title(row.part)}", ""]
    if image:
        lines += [f"![confusion matrix of {row.criterion}, {row.judge_model}]({image})", ""]
    ir = row.inter_rater
    lines.append(
        f"Items labelled: {row.items}; compared: {row.confusion.n}; judge ERROR: {row.errors}; "
        f"SKIPPED: {row.skipped}; no verdict: {row.missing_verdict}; no human reference (tie): "
        f"{row.no_reference}. Raters: {ir.raters}; items with two or more raters: {ir.items}."
    )
    lines.append("")
    for note in [*row.notes, *([ir.note] if ir.note else [])]:
        lines.append(f"- {note}")
    if row.notes or ir.note:
        lines.append("")
    if row.unresolved:
        lines += [
            f"Unresolved disagreements ({len(row.unresolved)}):",
            "",
            "| case | labels | reference |",
            "|---|---|---|",
        ]
        for d in row.unresolved[:MARKDOWN_DISAGREEMENTS]:
            labels = ", ".join(f"{rater}: {label}" for rater, label in d.labels)
            lines.append(f"| `{_cell(d.case_id)}` | {_cell(labels)} | {d.resolution} |")
        if len(row.unresolved) > MARKDOWN_DISAGREEMENTS:
            lines.append(
                f"| … | {len(row.unresolved) - MARKDOWN_DISAGREEMENTS} more in the JSON report | |"
            )
        lines.append("")
    return lines


DEFINITIONS = """\
## How the figures are computed

- PASS is the positive class. A *false pass* (FP) is a case the humans failed and
  the judge passed; a *false fail* (FN) is the reverse.
- The human reference of a case is the adjudicated label, else the raters'
  common label, else the strict majority; ties without adjudication are left
  out. Judge ERRORs and SKIPPED verdicts are left out and counted.
- Kappa is Cohen's kappa, (p_o - p_e) / (1 - p_e). It is undefined (n/a) when
  both sides used a single class.
- Balanced accuracy is the mean recall over the classes the humans used.
- Balanced F1 follows the Vertex AI judge-model evaluation (the SDK's
  `f1_score_balanced`): per-class F1 weighted by the number of human labels of
  each class. The JSON report also has `macro_f1`, the unweighted mean.
- Inter-rater kappa is Cohen's kappa between two raters; with more raters, the
  mean over rater pairs (Light's kappa).
- A criterion is fit to gate when its kappa is defined and at least the threshold.
"""


def calibration_markdown(
    report: CalibrationReport,
    *,
    images: Mapping[int, str],
    inputs: Sequence[tuple[str, str]],
    generated: str,
    title: str = "Judge calibration report",
) -> str:
    """The Markdown report; ``images`` maps a row's index in ``report.rows`` to its PNG name."""
    lines = [f"# {title}", "", f"Generated {generated} by `sidecar calibrate` from:", ""]
    lines += [f"- {what}: `{name}`" for what, name in inputs]
    lines += [
        "",
        f"Kappa threshold: {report.kappa_threshold}. Fitness to gate is decided on "
        + ("**all cases**." if not report.split else "**the held-out part**."),
        "",
    ]
    if report.split:
        lines += [
            f"Cases were split by the SHA-256 of their case id: {report.held_out_share:.0%} "
            "held out, the rest for calibration (tuning the rubric).",
            "",
        ]
    for warning in report.warnings:
        lines += [f"> **Warning:** {warning}", ""]
    for part in report.parts:
        lines += [f"## Summary: {_title(part)}", "", *_summary(report, part), ""]
    lines += ["## Per criterion", ""]
    for index, row in enumerate(report.rows):
        lines += _details(row, images.get(index))
    lines.append(DEFINITIONS)
    return "\n".join(lines)

"""Turn the LLMBar result files into sidecar calibration inputs (labels and verdicts).

LLMBar items are pairwise: an expert marks which of two outputs is better
(``label`` 1 or 2) and an LLM judge picks one (``winner``). Read as a binary
criterion "output 1 is the better answer", the expert's label is the human
label (PASS when it is 1) and the judge's pick in the original order
(``swap = False``) is the verdict (PASS when it is "1"). Each LLMBar file
becomes one criterion; the judge model named in the file is the verdict's
judge model. Nothing is copied: the files are read from shared/data.

    python docs/calibration-example/make_inputs.py OUT_DIR [DATA_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
RUBRIC_ID = "llmbar-pairwise"
RUBRIC_VERSION = "1"

# (result file, criterion, judge model)
SOURCES = (
    ("llmbar_natural_gpt4_vanilla_result.json", "natural_output_1_better", "gpt-4"),
    ("llmbar_natural_chatgpt_vanilla_result.json", "natural_output_1_better", "gpt-3.5-turbo"),
    ("llmbar_adversarial_manual_gpt4_vanilla_result.json", "adversarial_output_1_better", "gpt-4"),
    (
        "llmbar_processed_mtbench_gpt4_vanilla_norules_result.json",
        "mtbench_output_1_better",
        "gpt-4",
    ),
)


def build(data: Path) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    labels: dict[str, dict[str, object]] = {}
    verdicts: list[dict[str, object]] = []
    for name, criterion, judge_model in SOURCES:
        items = json.loads((data / name).read_text(encoding="utf-8"))
        prefix = criterion.split("_")[0]
        for index, item in enumerate(items):
            case_id = f"{prefix}-{index:03d}"
            labels[case_id] = {
                "case_id": case_id,
                "criterion": criterion,
                "rater": "llmbar-expert",
                "label": "PASS" if item["label"] == 1 else "FAIL",
            }
            winner = item["results"][0]["swap = False"]["winner"]
            verdicts.append(
                {
                    "trace_id": case_id,
                    "rubric_id": RUBRIC_ID,
                    "rubric_version": RUBRIC_VERSION,
                    "judge_model": judge_model,
                    "criteria": [
                        {
                            "name": criterion,
                            "outcome": "PASS" if winner == "1" else "FAIL",
                            "gate": True,
                        }
                    ],
                }
            )
    return list(labels.values()), verdicts


def main() -> None:
    out = Path(sys.argv[1])
    data = Path(sys.argv[2]) if len(sys.argv) > 2 else DATA
    labels, verdicts = build(data)
    out.mkdir(parents=True, exist_ok=True)
    for file, rows in (("labels.jsonl", labels), ("verdicts.jsonl", verdicts)):
        (out / file).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


if __name__ == "__main__":
    main()

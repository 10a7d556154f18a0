"""Offline trust in the judge: calibration against people, the release gate, pairwise comparison.

Modules, in the order data flows through them:

- ``stats``        kappa, agreement, balanced accuracy and F1, Wilson intervals (from counts)
- ``inputs``       label, adjudication and verdict lines -> records (models in ``sidecar.wire.labels`` and ``sidecar.wire.verdicts``)
- ``calibrate``    labels and verdicts -> per-criterion judge-vs-human report
- ``report``       terminal table, Markdown, confusion-matrix PNGs
- ``rubric_write`` the ``calibration:`` block and ``gate: false`` written back into a rubric
- ``gate``         pass/fail of an evaluation run on Wilson lower bounds and hard gates
- ``compare``      candidate vs baseline, judged in both orders (position bias)
- ``rolling``      rolling judge-human agreement for the production review loop

All of it is computation on data in memory; ``sidecar.commands.calibrate`` and
``sidecar.commands.gate`` read and write the files.
"""

"""``jattn reproduce``: every study's headline claims beside the papers', with the papers'
protocols, 95 % intervals, trivial baselines and per-example predictions (``STATISTICS.md``).

- ``pipeline``: stages, their keys (rerun only when inputs or code change) and the runner;
- ``claims``: a claim computed from, and recomputable from, its predictions file;
- ``report``: REPORT.md, reproduce.json and the README's results table;
- ``records``: one JSON record per stage;
- ``studies``: the registry the experiment scripts add their studies to (``experiments/``).
"""

__all__ = ["claims", "pipeline", "records", "report", "studies"]

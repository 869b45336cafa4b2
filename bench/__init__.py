"""Benchmarks: the bodies of ``netmon bench ingest|topk|topk-offline|distinct|join|pipeline``.

Each module runs its contenders in one process against a baseline measured in the same run and
returns the figures; the commands in ``cli/commands/bench_*.py`` only parse options and print.
Reproduce commands and results: ``docs/performance.md``. This floor stands above ``pipeline``,
``ingest`` and ``analytics`` (it drives them) and below the command line.

``__all__`` lists the modules.
"""

__all__ = [
    "calibrate",
    "calibrate_pipeline",
    "capture",
    "coverage",
    "dashboard_day",
    "dashboard_render",
    "distinct",
    "ingest",
    "join",
    "parse",
    "pipeline",
    "scaling",
    "soak",
    "soak_up",
    "spark_baseline",
    "topk",
]

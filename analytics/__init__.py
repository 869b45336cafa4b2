"""netmon's algorithms as plain Python: no Spark, no Kafka (a test imports them all without either).

Each algorithm is a small class with ``update``-style methods, noun-named queries and an exact twin
as its oracle; the docstrings cite the paper section they implement.

- top-k heavy hitters (Golab, ch. 6, Algorithm 6): ``topk``, its merge state for the Spark operator
  ``topk_merge``, the equal-memory baseline ``topk_baselines``, the offline query ``topk_offline``
  and the Figure 6.3 evaluation ``topk_eval``;
- distinct counts from sub-window synopses (Golab, §2.3.4): ``distinct``, ``distinct_queries``,
  ``distinct_offline``, ``distinct_bench``;
- window joins with load shedding (Ayad et al.): ``join``, ``shedding``, the cost model ``join_cost``,
  ``join_queries`` and the evaluation ``join_eval``;
- shared: record keys and weights ``keys``, durations and instants as text ``timetext``.

``__all__`` lists the modules (``from analytics import *`` imports them all).
"""

__all__ = [
    "distinct",
    "distinct_bench",
    "distinct_offline",
    "distinct_queries",
    "join",
    "join_cost",
    "join_eval",
    "join_queries",
    "keys",
    "shedding",
    "timetext",
    "topk",
    "topk_baselines",
    "topk_eval",
    "topk_merge",
    "topk_offline",
]

"""netmon's algorithms as plain Python: no Spark, no Kafka (a test imports them all without either).

Each algorithm is a small class with the verbs below, noun-named queries and an exact twin as its
oracle; the docstrings cite the paper section they implement.

- top-k heavy hitters (Golab, ch. 6, Algorithm 6): ``topk``, its merge state for the Spark operator
  ``topk_merge``, the equal-memory baseline ``topk_baselines``, the offline query ``topk_offline``
  and the Figure 6.3 evaluation ``topk_eval``;
- distinct counts from sub-window synopses (Golab, §2.3.4): ``distinct``, ``distinct_queries``,
  ``distinct_offline``, ``distinct_bench``;
- window joins with load shedding (Ayad et al.): ``join``, ``shedding``, the cost model ``join_cost``,
  ``join_queries`` and the evaluation ``join_eval``;
- overload (seeds 000, 004): plans of selections and joins with drop boxes ``plan``, the per-query
  cost model and its calibrated constants ``cost_model``, drop boxes on records and the
  Horvitz–Thompson counts and intervals they give ``sampling``, the ``netmon explain`` report ``explain``,
  the seeds' numbers reproduced (``netmon eval cost-model``) ``cost_eval``;
- alert detection (issue 20): exact per-window detection features ``alert_features`` (failed
  connection attempts, fan-in, half-open ratio) and learned per-subject baselines ``alert_baseline``;
- shared: record keys and weights ``keys``, durations and instants as text ``timetext``.

Verbs mean the same in every class, so a reader who knows one class knows the others
(``tests/analytics/test_classes.py`` checks it for every class):

==================  ==============================================================  ==============
verb                meaning                                                         returns
==================  ==============================================================  ==============
``update(...)``     feed records into the open sub-window (or the state);           ``self``
                    ``update_many``, ``update_synopsis``: the same, in bulk
``slide()``         close the open sub-window: it enters the window, the oldest     ``self``
                    beyond ``N/b`` expires, the next opens
``merge(other)``    add another instance's state over the same sub-windows; only    ``self``
                    where the result is what one instance fed both inputs holds
``report()``        the current window's answer; reads only (``to_bytes()`` and     see below
                    the next answer are unchanged)
batch forms         several of the above in one call; they return what each         outputs
                    closing produced, which ``report()`` no longer shows
==================  ==============================================================  ==============

Queries are nouns (``estimate``, ``bounds``, ``top``, ``delta``, ``space``, ``plan``) and read only.
Per family:

- top-k (``SubWindowTopK``, ``ExactSlidingTopK``, ``FrequentItemsTopK``): ``update``,
  ``update_many``, ``slide``; ``report()`` is the report dict or None (window not full, or,
  time-based, without data); batch forms ``seek(index)`` and ``add_subwindow(counts, index)`` return
  the reports made (``TopKMerge.add_subwindow``: their output rows). No ``merge``: a sub-window's
  top-k list of a union is not a function of the parts' lists.
- distinct (``SubWindowDistinct``, ``ExactSlidingDistinct``): ``update``, ``update_synopsis``,
  ``slide``, ``merge`` (same parameters and slide count); ``report()`` is ``{group: estimate}``.
- joins (``SymmetricHashJoin``, ``ExactWindowJoin``): ``update(left_ts, left_keys, right_ts,
  right_keys, ...)`` is one micro-batch (probe, insert, expire: the windows slide with event time,
  so no ``slide()``); ``report()`` is the last batch's result rows; the batch form
  ``process_batch(...)`` is ``update(...).report()``. No ``merge``: pairs across two instances were
  never probed. ``expired_unmatched()`` hands over, and clears, what expired without a partner.
- shedding: ``OnlineMaxSubset.update`` feeds its frequency model, ``report()`` is its plan;
  ``decide(...)`` (both shedders) is the batch form, one decision per tuple.

``__all__`` lists the modules (``from analytics import *`` imports them all).

Floor 2 of the house (README, "Architecture"): it stands on ``ingest`` and ``netmon``.
"""

__all__ = [
    "alert_baseline",
    "alert_features",
    "cost_eval",
    "cost_model",
    "distinct",
    "distinct_bench",
    "distinct_offline",
    "distinct_queries",
    "explain",
    "granularity",
    "hll_coupons",
    "join",
    "join_cost",
    "join_eval",
    "join_queries",
    "keys",
    "late",
    "plan",
    "sampling",
    "shedding",
    "sketch_carry",
    "sketch_windows",
    "timetext",
    "topk",
    "topk_baselines",
    "topk_eval",
    "topk_merge",
    "topk_offline",
    "window_plan",
]

"""The top floor: the ``netmon`` command line. It imports every package; nothing imports it.

``main`` is the click group (the console script ``netmon``), ``commands/`` one module per
subcommand (its options and one library call, imported only when that subcommand runs), and
``demo`` the whole system on one machine (broker, pipeline, replay, dashboard, alerts).

The floors, bottom up (``README.md``, "Architecture"): ``netmon`` (the ground floor of shared
contracts) → ``ingest`` → ``analytics`` → ``pipeline`` and ``alerts`` → ``dashboard`` → ``bench``
→ ``cli``. ``tests/test_packages.py`` fails on any import from a lower floor to a higher one.

``__all__`` lists the modules.
"""

__all__ = ["commands", "demo", "main"]

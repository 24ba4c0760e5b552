"""The checker: what a run's records prove, as pure functions of columns already in memory.

Given the input events and the output records (:mod:`pgval.records.parse`) and the phase bounds,
the checks answer without reading files, touching Kafka or Spark, or writing anywhere:

* :mod:`~pgval.checker.validator` — the paper's Algorithms 1–3: processed, duplicate,
  incorrect and unprocessed IDs, and the guarantee they show;
* :mod:`~pgval.checker.metrics` — reliable throughput, latency, failure cost;
* :mod:`~pgval.checker.recovery` — downtime, recovery and catch-up times;
* :mod:`~pgval.checker.explain` — why each unprocessed ID was (late, skipped, in flight,
  lost), from the driver's batch progress;
* :mod:`~pgval.checker.validity` — whether the run is evidence at all (``valid`` or
  ``unknown``), composed from each check's typed :mod:`~pgval.checker.result`;
* :mod:`~pgval.checker.evaluate` — all of the above in order, one :class:`Evaluation`;
* :mod:`~pgval.checker.render` — an evaluation drawn on the console it is handed (its one
  output; the terminal is the caller's).

Nothing is imported here, so ``import pgval.checker.result`` stays light (the fault rules
and the evidence manifest need only that).
"""

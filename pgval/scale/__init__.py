"""Past one machine: the checker as Spark jobs, for runs one process should not hold.

* :mod:`~pgval.scale.frames` — a run's expected outputs and produced outputs as Parquet
  tables Spark reads (one row a slot, an output, an ID occurrence);
* :mod:`~pgval.scale.checker` — the paper's Algorithms 1 and 3 as DataFrame operations, the
  same rules as :mod:`pgval.checker.validator`, with the anomaly sets written as Parquet;
* :mod:`~pgval.scale.agreement` — the two checkers held to each other on one run: identical
  counts, phase rows and anomaly sets, or the differences named.

Nothing is imported here: pyspark is loaded only by the modules that need it.
"""

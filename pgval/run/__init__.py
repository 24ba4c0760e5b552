"""The parts of one run (:class:`pgval.experiment.Experiment` ties them together):

* :mod:`~pgval.run.control` — pgval's own events: priming, closing, planted late events;
* :mod:`~pgval.run.monitor` — watching the query and the output topic: priming done,
  the warm-up's outputs, drain done;
* :mod:`~pgval.run.warmup` — when the pipeline is steady: the rule that starts control;
* :mod:`~pgval.run.schedule` — the fault schedule: inject at T2, remove at T3 or as the
  restart policy says, logged with when each step took effect;
* :mod:`~pgval.run.readback` — what Kafka holds, read to the end and kept as evidence;
* :mod:`~pgval.run.result` — what a run returns and what the live display shows.
"""

"""One run's steps, in the order :class:`pgval.run.experiment.Experiment` runs them:

* :mod:`~pgval.run.setup` — T0: the run's guard, the checks before anything starts, the
  deployment, topics, driver and fault, returned as frozen handles; what was started, for
  the teardown;
* :mod:`~pgval.run.timeline` — priming, the warm-up, the phases with the fault's schedule as
  timed operations, T4, closing events and the drain, recorded as one record;
* :mod:`~pgval.run.finalize` — the read-back and a job's batch oracle (``collect``), then
  run.json built once, the verdict, validity, seal and store;
* :mod:`~pgval.run.teardown` — everything the run started stopped, class archives dumped,
  a stored run's machinery deleted.

And the parts they use:

* :mod:`~pgval.run.own_events` — pgval's own events: priming, closing, planted late events;
* :mod:`~pgval.run.monitor` — watching the query and the output topic: priming done,
  the warm-up's outputs, drain done;
* :mod:`~pgval.run.warmup` — when the pipeline is steady: the rule that starts control;
* :mod:`~pgval.run.schedule` — the fault's steps: inject at T2, remove at T3 or as the
  restart policy says, logged with when each step took effect;
* :mod:`~pgval.run.readback` — what Kafka holds, read to the end and kept as evidence;
* :mod:`~pgval.run.sink_readback` — a sink other than Kafka watched while the run goes and read
  back after it; :mod:`~pgval.run.sink_files` and :mod:`~pgval.run.sink_delta` read a
  file sink's and a Delta table's log and data files;
* :mod:`~pgval.run.job_oracle` — a user's job's batch oracle as a process;
* :mod:`~pgval.run.result` — what a run returns and what the live display shows.
"""

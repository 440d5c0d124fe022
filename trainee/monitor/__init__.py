"""Round supervision: the monitor process, live log tailing, passive activity.

- :mod:`trainee.monitor.process` starts a round under ``trainee.shim``, tells a
  live monitor from a dead one, waits for ``exit.json``, asks for a stop.
- :mod:`trainee.monitor.tail` follows the round log and the job's own log files
  and hands their lines over in batches.
- :mod:`trainee.monitor.activity` keeps ``last_activity_at`` / ``idle_for``.
"""

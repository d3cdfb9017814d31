"""The runtime supervisor: a small process per project environment that keeps deployed queries and generators up.

- `records.py`: what the supervisor records of each resource (restarts, last exit and error, next retry), the
  backoff, and the fields `dsflow status` shows from it (no I/O beyond the record files).
- `supervisor.py`: the loop (`python -m dsflow.runtime.supervisor`), restarting a dead driver from its checkpoint.
- `control.py`: `dsflow runtime up|down|status` and the start `apply` asks for.
- `metrics.py`: the Prometheus text endpoint the supervisor serves on 127.0.0.1.
"""

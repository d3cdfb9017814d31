#!/bin/sh
# dsflow's container entrypoint (docs/runtime.md, "In a container"): apply the project, then become its runtime
# supervisor, which keeps the queries up and serves /metrics, until the container is stopped (SIGTERM).
#
#   DSFLOW_PROJECT   the project folder in the container (default /project); its .dsflow (state, checkpoints)
#                    belongs on a volume
#   DSFLOW_ENV       the environment (default: the project's default_environment)
#   DSFLOW_APPLY     0: do not apply at start (the state says what runs; the supervisor restarts it)
#   DSFLOW_METRICS_PORT  the supervisor's port on 127.0.0.1 (default 9464)
#
# Run it with an init as PID 1 (`docker run --init`, tini): drivers started by the apply outlive it and must be
# reaped when they exit.
set -eu
project="${DSFLOW_PROJECT:-/project}"
if [ -n "${DSFLOW_ENV:-}" ]; then
  set -- --env "$DSFLOW_ENV"
else
  set --
fi
if [ "${DSFLOW_APPLY:-1}" != "0" ]; then
  dsflow -C "$project" "$@" apply --auto-approve --no-runtime
fi
exec dsflow -C "$project" "$@" runtime up --foreground --port "${DSFLOW_METRICS_PORT:-9464}"

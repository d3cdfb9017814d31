"""The engine: what the commands do, walking the plan and the project (operations, apply, refresh, executors),
and the topic, entity and ad hoc query operations. The CLI (dsflow/cli/) and the server call it."""

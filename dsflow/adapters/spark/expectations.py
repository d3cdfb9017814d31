"""A query's expectations on the rows it writes (QuerySpec.expectations), in the micro-batch's own plan.

    result ─▶ one flag per rule (__e<i>: the condition, NULL counted as a violation; a row a changelog query
              deletes passes and is not counted)
           ─▶ observe("dsflow_expectations"): passed and failed rows per rule in each micro-batch (Spark's observed
              metrics: the driver reads them from the query's progress, `counts`)
           ─▶ FAIL QUERY: raise_error (DSF-E778, naming the rule and the row) in a filter, then a shuffle on the
              sink's key, so every row of the batch is checked before any task writes: nothing is written and the
              batch does not commit
           ─▶ DEAD LETTER: rows failing such a rule go to the query's dead-letter topic (the first source that has
              one; the store's `spark` facet sends them: `send_rows`), with headers naming the rule and why
           ─▶ DROP ROW: rows failing such a rule are not written; WARN: counted only
           ─▶ the result's own columns, for the sink

The flags are plain columns of a stateless projection after the query's SELECT: adding, changing or dropping a
rule keeps the query's checkpoint (the plan restarts it in place).
"""

from __future__ import annotations

from typing import Any

from dsflow.adapters.spark.spec import ExpectationSpec, QuerySpec, SourceSpec

METRICS = "dsflow_expectations"
"""The name of the observed metrics in a micro-batch's progress."""
KEEP, KEY = "__keep", "__key"
SOURCE_PARTITION, SOURCE_OFFSET = "__src_partition", "__src_offset"  # translate.carries_position
REASON = "__dl_reason"
DEAD_KEY, DEAD_VALUE, DEAD_POSITION = "__dl_key", "__dl_value", "__dl_position"
HEADER_EXPECTATION = "dsflow.expectation"


def flag(index: int) -> str:
    return f"__e{index}"


def guarded(result: Any, spec: QuerySpec) -> Any:
    """`result` with the spec's expectations applied (the module docstring), its columns as they were."""
    from pyspark.sql import functions as F

    rules = spec.expectations
    if not rules:
        return result
    columns = list(result.columns)
    checked = KEEP if KEEP in columns else None
    frame = result.select("*", *[F.coalesce(F.expr(rule.condition), F.lit(False)).alias(flag(i))
                                 for i, rule in enumerate(rules)])
    frame = frame.observe(METRICS, *_counters(rules, checked))
    failing = [i for i, rule in enumerate(rules) if rule.action == "fail"]
    if failing:
        frame = _fail_first(frame, spec, failing, checked, columns)
    dead = [i for i, rule in enumerate(rules) if rule.action == "dead_letter"]
    if dead:
        frame = _dead_letters(frame, spec, dead, checked, columns)
    dropped = [i for i, rule in enumerate(rules) if rule.action == "drop"]
    if dropped:
        frame = frame.where(_passes(dropped, checked))
    return frame.select(*[F.col(f"`{c}`") for c in columns if c not in (SOURCE_PARTITION, SOURCE_OFFSET)])


def _counters(rules: list[ExpectationSpec], checked: str | None) -> list[Any]:
    from pyspark.sql import functions as F

    applies = F.col(checked) if checked else F.lit(True)
    counters = []
    for i in range(len(rules)):
        counters.append(F.count(F.when(applies & F.col(flag(i)), True)).alias(f"passed{i}"))
        counters.append(F.count(F.when(applies & ~F.col(flag(i)), True)).alias(f"failed{i}"))
    return counters


def _passes(indexes: list[int], checked: str | None) -> Any:
    """A row passes the rules of `indexes`: each flag true, or it is a delete (not checked)."""
    from functools import reduce

    from pyspark.sql import functions as F

    every = reduce(lambda a, b: a & b, [F.col(flag(i)) for i in indexes])
    return every | ~F.col(checked) if checked else every


def _fail_first(frame: Any, spec: QuerySpec, failing: list[int], checked: str | None, columns: list[str]) -> Any:
    """Rows failing a FAIL QUERY rule raise DSF-E778 (the first such rule named, with the row); the shuffle after it
    ends the stage, so no task writes before every row was checked."""
    from pyspark.sql import functions as F

    row = F.to_json(F.struct(*[F.col(f"`{c}`") for c in columns if not c.startswith("__")]))
    message = _first_failed(failing, {i: F.concat(
        F.lit(f"DSF-E778: the expectation '{spec.expectations[i].name}' of query {spec.name} failed (ON VIOLATION "
              f"FAIL QUERY: {spec.expectations[i].condition}) on the row "), row,
        F.lit("; nothing of the micro-batch was written")) for i in failing})
    raised = F.when(message.isNotNull(), F.raise_error(message)).otherwise(F.lit(True))
    frame = frame.where(raised if not checked else ~F.col(checked) | raised)
    keys = spec.sink.key_columns or ([KEY] if KEY in columns else [])
    return frame.repartition(*[F.col(f"`{k}`") for k in keys]) if keys else frame.repartition(1)


def _first_failed(indexes: list[int], texts: dict[int, Any]) -> Any:
    """The text of the first rule of `indexes` the row fails, NULL if it fails none."""
    from pyspark.sql import functions as F

    found = F.lit(None).cast("string")
    for i in reversed(indexes):
        found = F.when(~F.col(flag(i)), texts[i]).otherwise(found)
    return found


def dead_letter_source(spec: QuerySpec) -> SourceSpec | None:
    """The source whose dead-letter topic rows failing a DEAD LETTER rule go to (the first that has one)."""
    return next((s for s in spec.sources if s.dlq_topic), None)


def _dead_letters(frame: Any, spec: QuerySpec, dead: list[int], checked: str | None, columns: list[str]) -> Any:
    """Rows failing a DEAD LETTER rule are sent to the dead-letter topic and left out; the others go on."""
    from pyspark.sql import functions as F

    source = dead_letter_source(spec)
    if source is None:
        raise ValueError(f"query {spec.name} has DEAD LETTER expectations but no dead-letter topic")
    reason = _first_failed(dead, {i: F.lit(f"expectation '{spec.expectations[i].name}' failed: "
                                           f"{spec.expectations[i].condition}") for i in dead})
    if checked:
        reason = F.when(F.col(checked), reason)
    visible = [c for c in columns if not c.startswith("__")]
    key = F.col(KEY) if KEY in columns else F.to_json(F.struct(*[F.col(f"`{k}`") for k in spec.sink.key_columns])) \
        if spec.sink.key_columns else F.lit(None).cast("string")
    position = F.concat_ws(":", F.col(SOURCE_PARTITION).cast("string"), F.col(SOURCE_OFFSET).cast("string")) \
        if SOURCE_OFFSET in columns else F.lit(None).cast("string")
    frame = frame.select("*", reason.alias(REASON), key.alias(DEAD_KEY),
                         F.to_json(F.struct(*[F.col(f"`{c}`") for c in visible])).alias(DEAD_VALUE),
                         position.alias(DEAD_POSITION))
    send = _sender(source, spec.name)
    return frame.mapInArrow(send, frame.schema).drop(REASON, DEAD_KEY, DEAD_VALUE, DEAD_POSITION)


def _sender(source: SourceSpec, query: str):
    """The mapInArrow function: each batch's rows with a reason sent (delivered before the task ends), the others
    yielded."""
    kind, config, topic, source_topic = source.kind, dict(source.client_config), source.dlq_topic, source.topic

    def send(batches):
        import pyarrow.compute as pc

        from dsflow.adapters.spark.facets import for_kind

        facet = for_kind(kind)
        for batch in batches:
            reasons = batch.column(REASON)
            failed = pc.is_valid(reasons)
            if pc.any(failed).as_py():
                rows = batch.filter(failed)
                records = [((k.encode() if k is not None else None), v.encode(), _headers(r, query, source_topic, p))
                           for k, v, r, p in zip(*(rows.column(c).to_pylist() for c in
                                                   (DEAD_KEY, DEAD_VALUE, REASON, DEAD_POSITION)), strict=True)]
                facet.send_rows(config, topic, records)  # type: ignore[union-attr]
                batch = batch.filter(pc.invert(failed))
            yield batch

    return send


def _headers(reason: str, query: str, topic: str, position: str | None) -> list[tuple[str, str]]:
    """A dead-lettered row's headers: why, the rule, the query, and its source record's place when carried."""
    headers = [("dsflow.error", reason), (HEADER_EXPECTATION, reason.split("'")[1]), ("dsflow.query", query)]
    if position:
        partition, offset = position.split(":")
        headers += [("dsflow.source.topic", topic), ("dsflow.source.partition", partition),
                    ("dsflow.source.offset", offset)]
    return headers


def counts(progress: list[dict[str, Any]], rules: list[ExpectationSpec], totals: dict[str, Any],
           last_batch: int | None) -> int | None:
    """Add the expectation counts of the progress entries after `last_batch` to `totals` ({rule: {action, passed,
    failed, last_batch_passed, last_batch_failed}}, changed in place); returns the last batch counted."""
    for entry in progress:
        batch = entry.get("batchId")
        metrics = (entry.get("observedMetrics") or {}).get(METRICS)
        if batch is None or (last_batch is not None and batch <= last_batch) or not metrics:
            continue
        metrics = metrics.asDict() if hasattr(metrics, "asDict") else metrics  # a Row from a live progress
        last_batch = batch
        for i, rule in enumerate(rules):
            passed, failed = int(metrics.get(f"passed{i}") or 0), int(metrics.get(f"failed{i}") or 0)
            total = totals.setdefault(rule.name, {"action": rule.action, "passed": 0, "failed": 0})
            total.update(passed=total["passed"] + passed, failed=total["failed"] + failed,
                         last_batch_passed=passed, last_batch_failed=failed)
    return last_batch

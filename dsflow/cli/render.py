"""Human renderings, each a pure function of serialized data (the plan JSON, diagnostics, status)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from dsflow.core.graph import Graph

SYMBOL = {"create": "+", "update": "~", "replace": "-/+", "delete": "-", "forget": ".", "refresh": "!",
          "no-op": " "}
COLOR = {"create": "green", "update": "yellow", "replace": "magenta", "delete": "red", "forget": "blue",
         "refresh": "cyan", "no-op": "dim"}
CATEGORY_TITLE = {"new": "new", "in_place": "in place", "keep_checkpoint": "keep checkpoint",
                  "carry_offsets": "carry offsets", "replay": "replay", "replace_relation": "replace relation",
                  "reset_checkpoint": "reset checkpoint"}


_MARKUP_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")
"""What rich would read as a markup tag (rich.markup.escape's pattern, without importing rich)."""


def escape_markup(text: str) -> str:
    """`text` printed as it is by a console reading markup: every tag-like `[...]` escaped (rich.markup.escape)."""
    text = _MARKUP_TAG.sub(lambda m: f"{m.group(1)}{m.group(1)}\\{m.group(2)}", text)
    return text + "\\" if text.endswith("\\") and not text.endswith("\\\\") else text


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table as plain text: columns aligned, each cell whole on one line (line breaks become spaces), a record
    per line; '-' for an empty cell."""
    cells = [[" ".join(str(c).split()) or "-" for c in row] for row in [list(headers), *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def plan_text(plan: dict[str, Any], color: bool = False, show_noop: bool = False) -> str:
    """The plan as Terraform-style text, from its JSON form; with `color`, rich markup around each change's line
    and every piece of data escaped."""
    lines = [f"dsflow plan for project '{plan['project']}', environment '{plan['environment']}'", ""]
    actionable = [c for c in plan["changes"] if c["action"] != "no-op" or c.get("imported")]
    if not actionable and not plan.get("retired"):
        lines.append("No changes. The deployed pipelines match the project.")
        lines += footer_lines(plan)
        return "\n".join(lines)
    for change in plan["changes"]:
        if change["action"] == "no-op" and not show_noop and not change.get("imported"):
            continue
        lines.append(_change_line(change, color))
        lines += [_escaped(f"      {label}: {text}", color) for label, text in change_details(change)]
    lines += [_escaped(line, color) for line in retired_lines(plan)]
    lines += ["", _escaped(summary_line(plan), color)]
    lines += [_escaped(line, color) for line in footer_lines(plan)]
    if color:
        lines[0] = escape_markup(lines[0])
    return "\n".join(lines)


def retired_lines(plan: dict[str, Any]) -> list[str]:
    """The kept old versions of blue/green deployments the plan removes."""
    return [f"  - old version of {r['query']}: {r.get('object', 'log')} {r['log']} deleted, checkpoint removed "
            f"({r['reason']})" for r in plan.get("retired") or []]


def _escaped(text: str, color: bool) -> str:
    return escape_markup(text) if color else text


def replay_timing(estimate: dict[str, Any]) -> str:
    """', about 4s at 5200 rows/s', ', at most 5m (...)' or ' (no measured rate yet)': the replay's time once its
    query runs (core/catchup.py)."""
    seconds = estimate.get("seconds")
    if not seconds:
        return " (no measured rate yet)"
    if estimate.get("seconds_upper_bound"):
        largest = estimate.get("largest_batch")
        held = f"held at most {largest:,} records" if largest else "were too alike in size"
        return (f", at most {_duration(seconds)} once it runs (its measured batches {held}: their fixed cost is "
                "counted per record)")
    return f", about {_duration(seconds)} at {estimate['rate_per_second']:.0f} rows/s once it runs"


def change_details(change: dict[str, Any]) -> list[tuple[str, str]]:
    """Labelled lines under a change: reason, category, effect, estimate, affected queries."""
    details = [("reason", change["reason"])]
    if change.get("physical"):
        details.append(("object", change["physical"]))
    if change.get("category") and change["category"] != "new":
        details.append(("category", CATEGORY_TITLE[change["category"]]))
    if change.get("override"):
        details.append(("override", f"'start.position' = '{change['override']}'"))
    if change.get("effect"):
        details.append(("effect", change["effect"]))
    estimate = change.get("estimate")
    if estimate:
        timing = replay_timing(estimate)
        per_log = estimate.get("sources") or {}
        each = f" ({', '.join(f'{log}: ~{n:,}' for log, n in sorted(per_log.items()))})" if len(per_log) > 1 else ""
        again = estimate.get("read_again")
        seen = f"; ~{again:,} of them read already by the deployed version: what they produced is written again" \
            if again else ""
        details.append(("replay", f"~{estimate['records']:,} records to reprocess{each}{timing}{seen}"))
        if any((estimate.get("gone") or {}).values()):
            details.append(("GONE", gone_text(change)))
    elif change.get("category") == "replay" and change["action"] != "no-op":
        details.append(("replay", "records to reprocess not counted: a source is replaced in this plan (it is "
                                  "rebuilt first), or the plan was made without a refresh"))
    if change.get("affected"):
        details.append(("affects", ", ".join(change["affected"])))
    if change.get("blue_green"):
        from dsflow.core.bluegreen import BlueGreen, interrupted_text, phase_text

        blue_green = BlueGreen.model_validate(change["blue_green"])
        if blue_green.interrupted is not None:
            details.append(("interrupted", interrupted_text(blue_green.interrupted, blue_green)))
        details += [("phase", text) for text in phase_text(blue_green)]
    if change.get("consumers"):
        details.append(("consumers", f"{', '.join(change['consumers'])} (consumer groups on its log, outside the "
                                     "project)"))
    if change.get("duplicates"):
        verb = "receives" if len(change["duplicates"]) == 1 else "receive"
        details.append(("duplicates", f"{', '.join(change['duplicates'])} {verb} the replayed records again"))
    if change.get("skips"):
        details.append(("SKIPS", skips_text(change)))
    if change.get("destroys"):
        details.append(("DESTROYS", destroys_text(change)))
    return details


def destroys_text(change: dict[str, Any]) -> str:
    """'~1,234 records (topic main/pageviews); ...' for a change that deletes records."""
    loss = change["destroys"]
    held = f"~{loss['records']:,} records" if loss.get("records") is not None else "its records (not counted)"
    if loss.get("prevented"):
        return f"{held} ({loss['object']}); refused: 'lifecycle.prevent_destroy' = 'true'"
    return f"{held} ({loss['object']}); apply needs --allow-destroy {change['address']} or --allow-data-loss"


def gone_text(change: dict[str, Any]) -> str:
    """What a replay cannot re-read: records the deployed version read that its source logs no longer hold."""
    gone = change["estimate"]["gone"]
    lost = "; ".join(f"~{n:,} records of {log}" for log, n in sorted(gone.items()) if n)
    return (f"{lost}, read by the deployed version, are no longer held (deleted by retention or on request): the "
            f"replay rebuilds without them; apply needs --allow-destroy {change['address']} or --allow-data-loss")


def skips_text(change: dict[str, Any]) -> str:
    """'~1,234 records ...' for a reset checkpoint: what its sources hold past its last committed batch."""
    records = change["skips"].get("records")
    held = f"~{records:,} records" if records is not None else "the records (not counted)"
    return (f"{held} its sources hold past its last committed batch, and any that arrive before apply stops it, are "
            f"never read; apply needs --allow-destroy {change['address']} or --allow-data-loss")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def summary_line(plan: dict[str, Any]) -> str:
    actionable = [c for c in plan["changes"] if c["action"] != "no-op" or c.get("imported")]
    if plan.get("mode") == "refresh-only":
        return f"Refresh: {len(actionable)} object(s) changed outside dsflow; apply records what was seen."
    counts = {a: sum(1 for c in actionable if c["action"] == a) for a in ("create", "update", "replace", "delete")}
    line = (f"Plan: {counts['create']} to create, {counts['update']} to update in place, "
            f"{counts['replace']} to replace, {counts['delete']} to delete")
    forgets = sum(1 for c in actionable if c["action"] == "forget")
    line += f", {forgets} to forget (kept, no longer managed)" if forgets else ""
    refreshes = sum(1 for c in actionable if c["action"] == "refresh")  # a query's interrupted deployment
    line += f", {refreshes} interrupted deployment(s) to roll back" if refreshes else ""
    imports = sum(1 for c in actionable if c.get("imported"))
    line = line.replace("Plan: ", f"Plan: {imports} to import, ") if imports else line
    line += "."
    destroying = [c for c in actionable if c.get("destroys")]
    if destroying:
        records = [c["destroys"].get("records") for c in destroying]
        counted = sum(n for n in records if n is not None)
        held = "not counted" if all(n is None for n in records) else f"~{counted:,} records" + \
            ("" if None not in records else " counted, the rest not")
        line += f" {len(destroying)} change(s) DESTROY records ({held})."
    skipping = [c for c in actionable if c.get("skips")]
    if skipping:
        line += f" {len(skipping)} change(s) SKIP records."
    losing = [c for c in actionable if any(((c.get("estimate") or {}).get("gone") or {}).values())]
    if losing:
        line += f" {len(losing)} replay(s) rebuild without records their sources no longer hold (GONE)."
    return line


def excluded_line(plan: dict[str, Any]) -> str:
    """What --exclude left out of the plan, as deployed."""
    return f"Excluded, left as deployed: {', '.join(plan['excluded'])}."


def footer_lines(plan: dict[str, Any]) -> list[str]:
    """What the plan leaves as it is, under its summary: what --exclude left out, the queries paused."""
    lines = [excluded_line(plan)] if plan.get("excluded") else []
    if plan.get("paused"):
        lines.append(f"Paused, left stopped on their checkpoints ('dsflow resume' starts them): "
                     f"{', '.join(plan['paused'])}.")
    return lines


def plan_markdown(plan: dict[str, Any]) -> str:
    """The plan as a pull-request comment."""
    title = f"### dsflow plan: `{plan['project']}` ({plan['environment']})"
    actionable = [c for c in plan["changes"] if c["action"] != "no-op" or c.get("imported")]
    footer = footer_lines(plan)
    if not actionable:
        return "\n\n".join([title, "No changes. The deployed pipelines match the project.", *footer])
    excluded = [*footer, ""] if footer else []
    lines = [title, "", f"**{summary_line(plan)}**", "", *excluded, "| | resource | action | category | reason |",
             "|---|---|---|---|---|"]
    for change in actionable:
        category = CATEGORY_TITLE.get(change.get("category") or "", "")
        drift = " (drift)" if change.get("drift") else ""
        lines.append(f"| `{_symbol(change)}` | `{change['address']}` | {change['action']}{drift} | "
                     f"{category} | {change['reason']} |")
    detailed = [c for c in actionable if c.get("effect") or c.get("estimate") or c.get("affected") or c.get("destroys")
                or c.get("skips")]
    if detailed:
        lines += ["", "<details><summary>What happens to running queries</summary>", ""]
        for change in detailed:
            lines.append(f"- `{change['address']}`")
            lines += [f"  - {label}: {text}" for label, text in change_details(change)[1:]]
        lines += ["", "</details>"]
    return "\n".join(lines)


def _change_line(change: dict[str, Any], color: bool) -> str:
    action = change["action"]
    if change.get("rollback_of"):
        action_text = f"{action}, rollback"
    elif change.get("moved_from"):
        action_text = f"{action}, moved from {change['moved_from']}"
    elif change.get("imported"):
        action_text = f"import {change['imported']}" + ("" if action == "no-op" else f", then {action}")
    elif change.get("keep_running") is not None:
        action_text = f"{action}, {'left running' if change['keep_running'] else 'stopped'}"
    else:
        action_text = action
    text = f"  {_symbol(change):>3} {change['address']}  ({action_text}{', drift' if change.get('drift') else ''})"
    return f"[{COLOR[action]}]{escape_markup(text)}[/]" if color else text


def _symbol(change: dict[str, Any]) -> str:
    """The action's symbol; '<=' for an import that only records the object as it is."""
    return "<=" if change.get("imported") and change["action"] == "no-op" else SYMBOL[change["action"]]


def diagnostics_text(diagnostics: list[dict[str, Any]]) -> str:
    lines = []
    for d in diagnostics:
        where = _where(d)
        lines.append(f"{where}{d['severity']} {d['code']}: {d['message']}")
        if d.get("hint"):
            lines.append(f"  hint: {d['hint']}")
    errors = sum(1 for d in diagnostics if d["severity"] == "error")
    warned = f"; {len(diagnostics) - errors} warning(s)" if len(diagnostics) > errors else ""
    lines.append(f"{errors} error(s) found{warned}." if errors else f"No errors found{warned}." if warned
                 else "No problems found.")
    return "\n".join(lines)


def _where(d: dict[str, Any]) -> str:
    if not d.get("file"):
        return ""
    if d.get("line"):
        return f"{d['file']}:{d['line']}:{d['col']}: " if d.get("col") else f"{d['file']}:{d['line']}: "
    return f"{d['file']}: "


def graph_text(graph: Graph) -> str:
    """An indented tree from the roots; a node with several parents appears under each."""
    lines: list[str] = []

    def walk(node, depth: int) -> None:
        lines.append(f"{'  ' * depth}{'└─ ' if depth else ''}{node}")
        for child in graph.dependents(node):
            walk(child, depth + 1)

    for root in graph.roots():
        walk(root, 0)
    return "\n".join(lines)


def graph_dot(graph: Graph) -> str:
    lines = ["digraph dsflow {", "  rankdir=LR;"]
    lines += [f'  "{n}" [shape={_dot_shape(n.kind.value)}];' for n in sorted(graph.nodes)]
    lines += [f'  "{a}" -> "{b}";' for a, b in sorted(graph.edges())]
    lines.append("}")
    return "\n".join(lines)


def _dot_shape(kind: str) -> str:
    return {"query": "box", "relation": "cylinder", "store": "folder"}.get(kind, "ellipse")


def graph_mermaid(graph: Graph) -> str:
    ids = {n: f"n{i}" for i, n in enumerate(sorted(graph.nodes))}
    lines = ["flowchart LR"]
    lines += [f'  {ids[n]}["{n}"]' for n in sorted(graph.nodes)]
    lines += [f"  {ids[a]} --> {ids[b]}" for a, b in sorted(graph.edges())]
    return "\n".join(lines)


def status_rows(entries: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for e in entries:
        rate = e.get("input_rows_per_second")
        rows.append([e["address"], _state_cell(e), f"{rate:.1f}" if isinstance(rate, (int, float)) else "-",
                     lag_cell(e), latency_cell(e), str(e.get("batch_id", "-")), str(e.get("last_progress_at") or "-"),
                     str(e.get("dead_letters", "-")), expectations_cell(e),
                     e.get("error") or e.get("last_error") or ""])
    return rows


def expectations_cell(entry: dict[str, Any]) -> str:
    """Per expectation, the rows that failed it of those checked since the driver started (`positive 3/10`), and
    the source records skipped under 'source.deserialization.error.handling' = IGNORE."""
    parts = [f"{name} {found.get('failed', 0)}/{found.get('passed', 0) + found.get('failed', 0)}"
             for name, found in (entry.get("expectations") or {}).items()]
    parts += [f"{entry['skipped_records']} skipped"] if entry.get("skipped_records") else []
    return ", ".join(parts) or "-"


def lag_cell(entry: dict[str, Any]) -> str:
    """Records behind (logs counted in records), the oldest unread record's age (logs with sequence numbers),
    write-ahead log bytes behind (change streams): adapters/spark/lag.py."""
    parts = [str(entry["lag_records"])] if entry.get("lag_records") is not None else []
    parts += [f"{entry['lag_max_millis']} ms"] if entry.get("lag_max_millis") is not None else []
    parts += [f"{entry['lag_total_wal_bytes']} B WAL"] if entry.get("lag_total_wal_bytes") is not None else []
    return ", ".join(parts) or "-"


def latency_cell(entry: dict[str, Any]) -> str:
    """The newest micro-batch with records: its trigger execution, and its end minus the newest event time it read
    (queries with a watermark); a real-time query's records of the last minute: p50 and p99 from source to sink;
    '-' for what is not known (core/latency.py)."""
    parts = [f"batch {duration_text(entry['batch_latency_ms'])}"] if entry.get("batch_latency_ms") is not None else []
    parts += ([f"event {duration_text(entry['event_time_lag_ms'])}"] if entry.get("event_time_lag_ms") is not None
              else [])
    if entry.get("record_latency_p99_ms") is not None:
        parts.append(f"records p50 {duration_text(entry['record_latency_p50_ms'])} "
                     f"p99 {duration_text(entry['record_latency_p99_ms'])}")
    return ", ".join(parts) or "-"


def duration_text(ms: float) -> str:
    """412 ms, 2.3 s, 4.0 min, 3.1 h, 1,102 d."""
    for limit, unit, size in ((1_000, "ms", 1), (120_000, "s", 1_000), (7_200_000, "min", 60_000),
                              (172_800_000, "h", 3_600_000)):
        if abs(ms) < limit:
            return f"{ms:.0f} ms" if unit == "ms" else f"{ms / size:.1f} {unit}"
    return f"{ms / 86_400_000:,.0f} d"


def blue_green_cell(deployment: dict[str, Any]) -> str:
    """Where a query's blue/green deployment stands: 'blue/green v2 catch_up (under way)', '... keep_old', '...
    failed: DSF-E961 ...'; '..., first moved out of real-time mode' when its deployed version was restarted in
    micro-batches before the build."""
    text = f"blue/green v{deployment['version']} {deployment['phase']}"
    text += " (under way)" if deployment.get("under_way") else ""
    text += ", first moved out of real-time mode" if deployment.get("micro_batches_from") else ""
    return text + (f": {deployment['error']}" if deployment.get("error") else "")


def _state_cell(entry: dict[str, Any]) -> str:
    """The state, with the runtime supervisor's restarts and next retry when there are any (dsflow/runtime)."""
    notes = [f"{entry['restarts']} restart(s)"] if entry.get("restarts") else []
    notes += [f"retry at {entry['next_retry']}"] if entry.get("next_retry") else []
    notes += [blue_green_cell(entry["blue_green"])] if entry.get("blue_green") else []
    return f"{entry['state']} ({', '.join(notes)})" if notes else str(entry["state"])

"""core/secrets.py (pure): keyed markers, and secret values scrubbed from messages and log lines.

`register` is process-wide, so every value here is unique to the test run.
"""

from __future__ import annotations

import logging
import uuid

from dsflow.core.secrets import (
    SCRUBBED,
    Redactor,
    ScrubFilter,
    is_legacy_mark,
    legacy_mark,
    register,
    registered,
    scrub,
)
from dsflow.errors import Diagnostic, DsflowError


def test_a_keyed_marker_detects_a_change_but_depends_on_the_key() -> None:
    one, other = Redactor(b"a" * 32), Redactor(b"b" * 32)
    assert one.mark("hunter2").startswith("sensitive:hmac:") and len(one.mark("hunter2")) == len("sensitive:hmac:") + 16
    assert one.mark("hunter2") == one.mark("hunter2") != one.mark("hunter3")
    assert one.mark("hunter2") != other.mark("hunter2"), "without the key a marker cannot be recomputed"
    assert "hunter2" not in repr(one) and "aaaa" not in repr(one)
    assert Redactor().mark("hunter2") == Redactor().mark("other") == "sensitive:unkeyed"


def test_legacy_markers_are_recognised_for_migration_only() -> None:
    assert legacy_mark("x") == "sensitive:2d711642b726" and is_legacy_mark(legacy_mark("x"))
    assert not is_legacy_mark(Redactor(b"k" * 32).mark("x")) and not is_legacy_mark("sensitive:zz")


def test_registered_values_and_their_list_items_are_scrubbed() -> None:
    run = uuid.uuid4().hex[:8]
    bootstrap = f"SASL_SSL://b1-{run}.internal:9093,b2-{run}.internal:9093"
    register([bootstrap, f"pw-{run}", "abc", ""])
    assert {bootstrap, f"b1-{run}.internal:9093", f"SASL_SSL://b1-{run}.internal:9093"} <= registered()
    assert "abc" not in registered(), "too short to scrub safely"
    text = f"cannot reach Kafka broker at {bootstrap}: b2-{run}.internal:9093 (refused); password pw-{run}"
    assert scrub(text) == f"cannot reach Kafka broker at {SCRUBBED}: {SCRUBBED} (refused); password {SCRUBBED}"


def test_errors_and_log_lines_never_show_a_registered_value() -> None:
    secret = f"token-{uuid.uuid4().hex}"
    register([secret])
    err = DsflowError("DSF-E702", f"cannot reach Kafka broker at {secret}", hint=f"fix {secret}")
    assert secret not in str(err) and SCRUBBED in str(err)
    assert secret not in str(Diagnostic("DSF-E702", secret, hint=secret).to_dict())
    record = logging.LogRecord("dsflow.kafka", logging.WARNING, __file__, 1, "CONFWARN [%s#producer-1] x", (secret,),
                               None)
    assert ScrubFilter().filter(record) and secret not in record.getMessage()

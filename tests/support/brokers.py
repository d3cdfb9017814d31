"""Marks that choose the broker a test runs on (tests/conftest.py's `broker` fixture).

- `both_brokers`: the Kafka-contract subset (produce and consume, offsets and ranges, transaction markers,
  compaction, the admin calls dsflow makes) runs on Apache Kafka and on tansu, `dsflow dev up`'s JVM-free
  default; docs/dependencies.md says what differs between them.
- `tansu_only`: a test that pins a behaviour of tansu itself (a misreported watermark, no ACLs).
- `kafka_only`: a test of what only Apache Kafka has (CreatePartitions, TLS, SASL, kcat).
"""

import pytest

both_brokers = pytest.mark.parametrize("broker", ["kafka", "tansu"], indirect=True, scope="session")
kafka_only = pytest.mark.parametrize("broker", ["kafka"], indirect=True, scope="session")
tansu_only = pytest.mark.parametrize("broker", ["tansu"], indirect=True, scope="session")

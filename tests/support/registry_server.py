"""The Confluent-compatible schema registry the tests run: the product's dev registry
(dsflow/adapters/kafka/devregistry.py, `dsflow dev up --registry`), started in the test's own process.

    server = RegistryServer(auth=("u", "p")).start()   # server.url, then server.stop()
"""

from __future__ import annotations

from dsflow.adapters.kafka.devregistry import Registry, RegistryServer

__all__ = ["Registry", "RegistryServer"]

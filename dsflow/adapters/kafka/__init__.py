"""Kafka-protocol stores: admin, clients, the Spark data source and the embedded dev broker."""

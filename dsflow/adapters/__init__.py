"""Adapters at the edge: brokers, stores, the Spark runtime and state backends.

Heavy SDKs (confluent-kafka, pyspark, boto3) are imported inside these modules only.
"""

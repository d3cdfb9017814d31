"""Adapters at the edge: brokers, stores, the Spark runtime and state backends.

Heavy SDKs (the brokers' and clouds' clients, pyspark) are imported inside these modules only.
"""

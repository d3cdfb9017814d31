"""Kinesis streams: a boto3 client from store settings, admin (create/delete/describe), a Spark Python data
source `dsflow_kinesis` (datasource.py), value formats and dead letters (decoding.py, on dsflow/formats/),
apply/refresh (executor.py) and the topic commands' records.py."""

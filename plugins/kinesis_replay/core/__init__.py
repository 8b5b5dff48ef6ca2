"""The domain core: batches, ranges, the ledger's records, the config and the job spec.

The standard library, and three small outside packages, each imported inside the one function that needs it:
PyYAML (config's loader), aws-kinesis-agg with its protobuf (records' deaggregator) and xxhash (records' row
digest). No Airflow, Spark, boto3, pyarrow or pyiceberg, so that everything here is tested in milliseconds.
"""

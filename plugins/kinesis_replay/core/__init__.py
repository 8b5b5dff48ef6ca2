"""The domain core: batches, ranges, the ledger's records, the config and the job spec.

Standard library, PyYAML and aws-kinesis-agg only: no Airflow, Spark, boto3, pyarrow or pyiceberg, so that
everything here is tested in milliseconds.
"""

"""One outside system each: Kinesis (boto3), the state table (DynamoDB), the output's files (pyarrow), the table (pyiceberg).

They import the core and each other, never Airflow or Spark.
"""

"""The steps a DAG task calls, in the protocol's order: plan, in flight, verify, commit; backfill, recovery, maintenance.

They take the adapters' clients and stores as arguments and import no Airflow, Spark or boto3, so that each is tested
without them.
"""

"""What the Airflow page shows: a pipeline's state read from the ledger (status) and its charts (inline SVG)."""

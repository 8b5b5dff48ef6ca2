"""How Airflow's components connect to the SQLite metadata database of `make up` ([database] sql_alchemy_connect_args).

The scheduler, the api-server, the DAG processor and every task's supervisor write to one SQLite file. sqlite3
waits 5 s for another writer's lock by default; on a busy 2-core machine a REST call then failed with "database
is locked" (HTTP 500). Waiting longer, with the database in WAL mode (set by up.migrate; readers then never block
the writer), makes a lock a delay instead of an error.
"""

from __future__ import annotations

from typing import Any

CONNECT_ARGS: dict[str, Any] = {"timeout": 60}

"""An auth manager for tests: Airflow's SimpleAuthManager, except that some users may read no DAG at all."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.base_auth_manager import ResourceMethod
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

# Every SimpleAuthManager role (viewer, user, op, admin) may read every DAG. The users named here (comma-separated)
# log in with their configured role, and may read no DAG, as a user of a real auth manager (FAB, Keycloak) can be
# given no DAG permission.
NO_DAG_ACCESS_ENV = "KINESIS_REPLAY_TEST_NO_DAG_USERS"


class NoDagAccessAuthManager(SimpleAuthManager):
    """Set with ``AIRFLOW__CORE__AUTH_MANAGER=stack.auth_manager.NoDagAccessAuthManager``, with tests/ on PYTHONPATH."""

    def is_authorized_dag(
        self,
        *,
        method: ResourceMethod,
        user: SimpleAuthManagerUser,
        access_entity: DagAccessEntity | None = None,
        details: DagDetails | None = None,
    ) -> bool:
        # The batched and filtering questions (filter_authorized_dag_ids, get_authorized_dag_ids) all come here.
        if user.username in os.environ.get(NO_DAG_ACCESS_ENV, "").split(","):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)

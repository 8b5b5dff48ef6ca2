"""plugins/kinesis_replay/iam_policy.json grants exactly the AWS calls the code makes: Kinesis, DynamoDB, s3a's S3 and the table's Glue.

A pipeline that reads over enhanced fan-out (``read.consumer``) adds iam_policy_efo.json, which grants exactly the calls
of the modules that only such a pipeline runs (EFO_MODULES), and nothing the base policy grants."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import botocore.session
from botocore import xform_name

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "plugins" / "kinesis_replay" / "iam_policy.json"
SOURCE_GLOBS = ("plugins/kinesis_replay/**/*.py", "spark_jobs/*.py", "dags/*.py")
SERVICES = ("kinesis", "dynamodb")
# Modules that call no Kinesis or DynamoDB API: pyiceberg's Table.scan is a table scan, not DynamoDB's Scan.
NO_AWS_CLIENT = {"plugins/kinesis_replay/adapters/iceberg_table.py", "plugins/kinesis_replay/adapters/pyiceberg_patches.py"}

# IAM has no TransactWriteItems action: each item of a transaction is authorized as its own action.
TRANSACT_ITEM_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem"}
# Kinesis and DynamoDB actions granted although no code calls them. Empty: add one only with the reason beside it.
ALLOWED_UNCALLED: frozenset[str] = frozenset()
# The Spark job writes through Hadoop's s3a (write to staging, rename by copy and delete, multipart uploads for
# large files, which a failed task aborts); the verify step reads the manifest and Parquet files with pyarrow.
S3_ACTIONS = {
    "s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket",
    "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts", "s3:ListBucketMultipartUploads",
}  # fmt: skip
# pyiceberg's GlueCatalog, for a pipeline whose table is in the Glue Data Catalog: create_namespace (CreateDatabase),
# namespace_exists (GetDatabase), create_table, load_table and table_exists (GetTable), commit_table (GetTable, then
# UpdateTable on the version it read). tests/integration/test_glue_catalog.py records the calls a pipeline's DAGs make.
GLUE_ACTIONS = {"glue:CreateDatabase", "glue:GetDatabase", "glue:CreateTable", "glue:GetTable", "glue:UpdateTable"}
# A pipeline whose stream_conn_id names a role of the stream's account: the provider (DAG side) and the job's stream profile
# (launchers/credentials.for_stream) assume it with the base credentials, through STS.
STS_ACTIONS = {"sts:AssumeRole"}
# The stream's resource policy, for a stream in another account reached without a role (docs/deploy-aws.md).
STREAM_RESOURCE_POLICY = ROOT / "plugins" / "kinesis_replay" / "iam_policy_stream_resource.json"
EFO_POLICY = ROOT / "plugins" / "kinesis_replay" / "iam_policy_efo.json"
EFO_MODULES = {"plugins/kinesis_replay/adapters/efo_reader.py"}  # reached only with read.consumer set
# Granted for an EFO pipeline although no code calls it: RegisterStreamConsumer with Tags (the pipeline's tag on a consumer
# it registers) is authorized as kinesis:TagResource on the consumer too.
EFO_IMPLIED = {"kinesis:TagResource"}
RESOURCES = {
    "kinesis": {"arn:aws:kinesis:REGION:ACCOUNT:stream/STREAM", "arn:aws:kinesis:REGION:ACCOUNT:stream/STREAM/consumer/CONSUMER:*"},
    "sts": {"arn:aws:iam::STREAM_ACCOUNT:role/STREAM_ROLE"},
    "dynamodb": {"arn:aws:dynamodb:REGION:ACCOUNT:table/STATE_TABLE"},
    "s3": {"arn:aws:s3:::BUCKET/PREFIX/*", "arn:aws:s3:::BUCKET"},
    # Glue authorizes a table's calls on its catalog, its database and the table itself.
    "glue": {
        "arn:aws:glue:REGION:ACCOUNT:catalog",
        "arn:aws:glue:REGION:ACCOUNT:database/NAMESPACE",
        "arn:aws:glue:REGION:ACCOUNT:table/NAMESPACE/TABLE",
    },
}


@dataclass(frozen=True)
class ApiCall:
    action: str  # as IAM names it: dynamodb:PutItem
    where: str  # file:line of the call


@cache
def _operations(service: str) -> dict[str, str]:
    """snake_case method name -> API operation, from botocore's own service model (no AWS call)."""
    model = botocore.session.get_session().get_service_model(service)
    return {xform_name(op): op for op in model.operation_names}


@cache
def _waiters(service: str) -> dict[str, str]:
    """snake_case waiter name -> the operation it polls (table_exists -> DescribeTable)."""
    model = botocore.session.get_session().get_waiter_model(service)
    return {xform_name(name): model.get_waiter(name).operation for name in model.waiter_names}


def _action(name: str, table: dict[str, dict[str, str]], where: str) -> str | None:
    services = [s for s in SERVICES if name in table[s]]
    if not services:
        return None
    assert len(services) == 1, f"{where}: {name} is an operation of both {' and '.join(services)}: say which client it is called on"
    return f"{services[0]}:{table[services[0]][name]}"


def scan(source: str, filename: str, item_kinds: set[str] | None = None) -> set[ApiCall]:
    """Every Kinesis and DynamoDB API call in a module, as IAM actions.

    Seen: ``client.get_records(...)`` and ``call(client.list_shards, ...)`` (any attribute named like an
    operation), ``self.db.call("put_item", ...)`` and ``getattr(client, "query")`` (an operation's name as a
    string), ``get_waiter("table_exists")`` (the operation the waiter polls), and the items of a
    ``transact_write_items`` transaction (``{"Put": ...}``, ``{"ConditionCheck": ...}``), which may be built in
    another module than the one that sends them: ``item_kinds``, when given, are those seen in every module.
    """
    operations = {s: _operations(s) for s in SERVICES}
    waiters = {s: _waiters(s) for s in SERVICES}
    found: set[ApiCall] = set()
    transact: list[str] = []
    seen_kinds: set[str] = set()
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        names: list[str] = []
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
        elif isinstance(node, ast.Call):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            literals = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if func == "get_waiter" and literals:
                action = _action(literals[0], waiters, where)
                assert action is not None, f"{where}: unknown waiter {literals[0]!r}"
                found.add(ApiCall(action, where))
            elif func in ("call", "getattr"):
                names.extend(literals)
        elif isinstance(node, ast.Dict):
            seen_kinds.update(k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in TRANSACT_ITEM_ACTIONS)
        for name in names:
            action = _action(name, operations, where)
            if action == "dynamodb:TransactWriteItems":
                transact.append(where)
            elif action is not None:
                found.add(ApiCall(action, where))
    kinds = seen_kinds if item_kinds is None else item_kinds
    for where in transact:
        assert kinds, f"{where}: a transaction whose items this scan cannot see"
        found.update(ApiCall(f"dynamodb:{TRANSACT_ITEM_ACTIONS[kind]}", where) for kind in kinds)
    return found


def item_kinds_in(sources: list[tuple[str, str]]) -> set[str]:
    """The kinds of transaction items (Put, Update, ConditionCheck...) any of the modules builds."""
    return {
        k.value
        for source, filename in sources
        for node in ast.walk(ast.parse(source, filename))
        if isinstance(node, ast.Dict)
        for k in node.keys
        if isinstance(k, ast.Constant) and k.value in TRANSACT_ITEM_ACTIONS
    }


def project_calls(efo: bool = False) -> set[ApiCall]:
    """The calls of every module a pipeline runs; ``efo``: of the modules only a pipeline with a consumer runs."""
    paths = sorted(
        p for pattern in SOURCE_GLOBS for p in ROOT.glob(pattern)
        if str(p.relative_to(ROOT)) not in NO_AWS_CLIENT and (str(p.relative_to(ROOT)) in EFO_MODULES) == efo
    )  # fmt: skip
    sources = [(path.read_text(), str(path.relative_to(ROOT))) for path in paths]
    kinds = item_kinds_in(sources)  # a transaction's items are built by the store, and sent by its table's calls
    return {call for source, filename in sources for call in scan(source, filename, kinds)}


def statements(path: Path = POLICY) -> list[dict[str, Any]]:
    policy = json.loads(path.read_text())
    assert policy["Version"] == "2012-10-17"
    return list(policy["Statement"])


def _as_list(value: str | Iterable[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def granted(service: str, path: Path = POLICY) -> set[str]:
    return {a for s in statements(path) if s["Effect"] == "Allow" for a in _as_list(s["Action"]) if a.startswith(f"{service}:")}


def test_the_policy_grants_every_kinesis_and_dynamodb_call_the_code_makes() -> None:
    calls = project_calls()
    assert {c.action.split(":")[0] for c in calls} == set(SERVICES), "the scan found no calls of a service: is it broken?"
    allowed = granted("kinesis") | granted("dynamodb")
    missing = sorted(f"{c.action} (called at {c.where})" for c in calls if c.action not in allowed)
    assert not missing, f"{POLICY.relative_to(ROOT)} lacks: " + "; ".join(missing)


def test_the_policy_grants_no_kinesis_or_dynamodb_action_the_code_does_not_call() -> None:
    called = {c.action for c in project_calls()}
    extra = (granted("kinesis") | granted("dynamodb")) - called - ALLOWED_UNCALLED
    assert not extra, f"{POLICY.relative_to(ROOT)} grants actions no code calls: {sorted(extra)}"


def test_the_efo_policy_grants_exactly_the_calls_of_reading_over_enhanced_fan_out_beyond_the_base_policy() -> None:
    calls = {c.action for c in project_calls(efo=True)}
    assert "kinesis:SubscribeToShard" in calls, "the scan found no SubscribeToShard in the EFO reader: is it broken?"
    assert granted("kinesis", EFO_POLICY) == calls - granted("kinesis") | EFO_IMPLIED
    assert not granted("kinesis", EFO_POLICY) & granted("kinesis")


def test_the_policy_grants_exactly_the_s3_actions_s3a_and_pyarrow_need() -> None:
    assert granted("s3") == S3_ACTIONS


def test_the_policy_grants_exactly_the_glue_actions_pyicebergs_glue_catalog_makes_for_the_table() -> None:
    assert granted("glue") == GLUE_ACTIONS


def test_each_action_is_granted_only_on_its_own_services_placeholder_resource() -> None:
    for statement in statements() + statements(EFO_POLICY):
        services = {a.split(":")[0] for a in _as_list(statement["Action"])}
        assert len(services) == 1, f"statement {statement.get('Sid')} mixes services {sorted(services)}"
        resources = set(_as_list(statement["Resource"]))
        assert resources <= RESOURCES[services.pop()], f"statement {statement.get('Sid')} reaches {sorted(resources)}"
        assert not any("*" in a for a in _as_list(statement["Action"])), f"statement {statement.get('Sid')} has a wildcard action"


def test_the_scan_sees_every_form_of_call_the_code_uses() -> None:
    source = """
client.get_records(ShardIterator=it)
call(client.list_shards, "listing", limits, StreamName=s)
self.db.call("query", "reading", TableName=t)
getattr(self.client, "put_item")(Item=i)
self.client.get_waiter("table_exists").wait(TableName=t)
self.call("transact_write_items", "planning", TransactItems=[{"Put": put}, {"ConditionCheck": check}])
log.info("get_item is only a word here")
"""
    assert {c.action for c in scan(source, "example.py")} == {
        "kinesis:GetRecords", "kinesis:ListShards", "dynamodb:Query", "dynamodb:PutItem",
        "dynamodb:DescribeTable", "dynamodb:ConditionCheckItem",
    }  # fmt: skip


EMR_POLICY = ROOT / "plugins" / "kinesis_replay" / "iam_policy_emr_serverless.json"


def operator_calls() -> set[str]:
    """The EMR Serverless API calls EmrServerlessStartJobOperator makes: on its client, and through its waiters."""
    import inspect
    import re

    import airflow.providers.amazon.aws as provider
    from airflow.providers.amazon.aws.operators.emr import EmrServerlessStartJobOperator

    source = inspect.getsource(EmrServerlessStartJobOperator)
    operations = _operations("emr-serverless")
    waiters = json.loads((Path(provider.__path__[0]) / "waiters" / "emr-serverless.json").read_text())["waiters"]
    calls = {operations[name] for name in re.findall(r"conn\.(\w+)\(", source)}
    calls |= {waiters[name]["operation"] for name in re.findall(r"get_waiter\(\"(\w+)\"", source)}
    return {f"emr-serverless:{op}" for op in calls}


def test_the_emr_serverless_policy_grants_exactly_what_the_operator_calls_and_the_staging_upload() -> None:
    policy = json.loads(EMR_POLICY.read_text())
    actions = {a for s in policy["Statement"] if s["Effect"] == "Allow" for a in _as_list(s["Action"])}
    calls = operator_calls()
    assert "emr-serverless:StartJobRun" in calls, "the scan of the operator found no StartJobRun: is it broken?"
    assert {a for a in actions if a.startswith("emr-serverless:")} == calls
    assert actions - calls == {"iam:PassRole", "s3:PutObject"}  # the execution role, and S3Hook.load_file staging the job
    (pass_role,) = [s for s in policy["Statement"] if s["Action"] == "iam:PassRole"]
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "emr-serverless.amazonaws.com"}}
    sent = 'self.call("transact_write_items", what, TransactItems=items)'  # the table's calls send what the store built
    built = 'items = [{"Update": head}, {"Put": batch}]'
    kinds = item_kinds_in([(sent, "table.py"), (built, "store.py")])
    assert {c.action for c in scan(sent, "table.py", kinds)} == {"dynamodb:UpdateItem", "dynamodb:PutItem"}


def test_the_policy_grants_assuming_the_streams_role_which_the_code_assumes_for_a_stream_connection_with_one() -> None:
    assert granted("sts") == STS_ACTIONS
    tasks = (ROOT / "dags" / "kinesis_replay_tasks.py").read_text()
    launcher = (ROOT / "plugins" / "kinesis_replay" / "launchers" / "credentials.py").read_text()
    assert "KinesisHook(aws_conn_id=pipeline.kinesis_conn_id" in tasks, "the DAG's stream hook no longer uses stream_conn_id?"
    assert "def for_stream(" in launcher and '{"role_arn": role.arn}' in launcher, "the job's stream profile no longer assumes a role?"


def test_the_streams_resource_policy_grants_the_pipeline_exactly_the_kinesis_calls_the_code_makes_on_that_stream() -> None:
    policy = json.loads(STREAM_RESOURCE_POLICY.read_text())
    (statement,) = policy["Statement"]
    called = {c.action for c in project_calls() if c.action.startswith("kinesis:")}
    assert set(_as_list(statement["Action"])) == called
    assert statement["Resource"] == "arn:aws:kinesis:REGION:STREAM_ACCOUNT:stream/STREAM"
    assert statement["Principal"] == {"AWS": "arn:aws:iam::ACCOUNT:role/PIPELINE_ROLE"}

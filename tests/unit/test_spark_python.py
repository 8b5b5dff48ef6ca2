"""The Spark side's Python, made cheaper without changing what it computes: GetRecords pages parsed in one loop, and
Spark's Python processes importing pyspark from its installed package rather than from Spark's zip."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import py4j
import pyspark
from botocore.parsers import JSONParser
from botocore.session import get_session

import kinesis_source
from kinesis_replay.core.config import DEFAULT_SPARK_CONF, parse_config
from kinesis_replay.launchers import installed_pyspark, spark_submit

SHAPE = get_session().get_service_model("kinesis").operation_model("GetRecords").output_shape


def parse(parser: Any, body: dict[str, Any]) -> Any:
    return parser.parse({"body": json.dumps(body).encode(), "headers": {}, "status_code": 200}, SHAPE)


def record(n: int, **changes: Any) -> dict[str, Any]:
    base = {"SequenceNumber": str(10**55 + n), "ApproximateArrivalTimestamp": 1764000000.125 + n,
            "Data": base64.b64encode(b"payload %d \x00\xff" % n).decode(), "PartitionKey": f"k{n}"}  # fmt: skip
    return {k: v for k, v in {**base, **changes}.items() if v is not ...}


def test_get_records_pages_parse_as_botocores_own_walk_does_on_every_shape_of_record() -> None:
    body = {
        "Records": [
            record(1), record(2, EncryptionType="KMS"), record(3, EncryptionType=None),
            record(4, PartitionKey=...),  # no key: Kinesis's AUTO distribution may leave it out
            record(5, ApproximateArrivalTimestamp=1764000005),  # a whole number of seconds
            record(6, Data=None), record(7, Unknown="x"), record(8, Data=""),
        ],
        "NextShardIterator": "AAAA", "MillisBehindLatest": 12,
        "ChildShards": [{"ShardId": "shardId-000000000009", "ParentShards": ["shardId-000000000001"],
                         "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "9"}}],
    }  # fmt: skip
    ours = kinesis_source.records_parser()(timestamp_parser=kinesis_source.utc_timestamp)
    botocores = JSONParser(timestamp_parser=kinesis_source.utc_timestamp)
    fast, walked = parse(ours, body), parse(botocores, body)
    assert fast == walked
    assert [type(v) for v in fast["Records"][0].values()] == [type(v) for v in walked["Records"][0].values()]
    assert fast["Records"][0]["Data"] == b"payload 1 \x00\xff" and fast["Records"][0]["ApproximateArrivalTimestamp"].tzinfo is not None
    assert parse(ours, {"NextShardIterator": "B"}) == parse(botocores, {"NextShardIterator": "B"})  # no Records member at all
    assert parse(ours, {"Records": []}) == parse(botocores, {"Records": []})


def test_the_readers_session_parses_get_records_with_the_fast_parser_and_all_else_with_botocores() -> None:
    factory = kinesis_source.utc_botocore_session().get_component("response_parser_factory")
    assert isinstance(factory.create_parser("json"), kinesis_source.records_parser())
    assert type(factory.create_parser("rest-json")).__name__ == "RestJSONParser"


SITE = Path(pyspark.__file__).parent  # pip's pyspark: SPARK_HOME, holding python/lib/pyspark.zip


def spark_zips() -> list[str]:
    lib = SITE / "python" / "lib"
    return [str(lib / "pyspark.zip"), *map(str, sorted(lib.glob("py4j-*-src.zip")))]


def test_sparks_zips_are_dropped_where_the_same_version_is_installed_further_along_the_path() -> None:
    zips = spark_zips()
    assert len(zips) == 2 and all(Path(z).is_file() for z in zips)
    path = [*zips, "/nowhere", str(SITE.parent)]
    assert installed_pyspark.shadowing(path) == zips
    assert installed_pyspark.shadowing(zips) == []  # nothing installed after them: they stay
    assert installed_pyspark.shadowing([str(SITE.parent), *zips]) == []  # installed before them: they shadow nothing


def test_a_zip_of_another_version_or_of_a_spark_distribution_stays(tmp_path: Path) -> None:
    other = tmp_path / "spark" / "python" / "lib" / "pyspark.zip"
    other.parent.mkdir(parents=True)
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("pyspark/__init__.py", "")
        zf.writestr("pyspark/version.py", '__version__ = "0.0.1"\n')
    assert installed_pyspark.shadowing([str(other), str(SITE.parent)]) == []
    broken = tmp_path / "other" / "python" / "lib" / "pyspark.zip"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not a zip")
    assert installed_pyspark.shadowing([str(broken), str(SITE.parent)]) == []


def test_prefer_installed_leaves_the_path_alone_once_pyspark_is_imported() -> None:
    assert "pyspark" in sys.modules
    path = [*spark_zips(), str(SITE.parent)]
    installed_pyspark.prefer_installed(path)
    assert path == [*spark_zips(), str(SITE.parent)]


JOBS = Path(kinesis_source.__file__).parent
ENTRY = {"name": "orders", "stream": "s", "output": "/o", "schedule": None, "initial_position": "LATEST", "state_table": "t"}


def daemon_conf(tmp_path: Path, spark: dict[str, Any]) -> dict[str, str]:
    pipeline = parse_config({"pipelines": [{**ENTRY, "spark": spark}]})[0]
    library = spark_submit.package_library(tmp_path / "lib.zip")
    command = spark_submit.build_command(pipeline, 1, tmp_path / "b.json", JOBS / "replay_job.py", [library, JOBS / "kinesis_source.py"])
    confs = dict(c.split("=", 1) for c in command if "=" in c and c.startswith("spark."))
    return {k: v for k, v in confs.items() if k in (spark_submit.PYTHON_DAEMON_MODULE, spark_submit.WORKERS_PYTHONPATH)}


def test_local_jobs_start_their_python_workers_from_the_jobs_daemon(tmp_path: Path) -> None:
    assert daemon_conf(tmp_path, {"master": "local[2]"}) == {
        "spark.python.daemon.module": "python_daemon",
        "spark.executorEnv.PYTHONPATH": f"{(tmp_path / 'lib.zip').resolve()}:{JOBS.resolve()}",
    }
    assert daemon_conf(tmp_path, {"master": "spark://host:7077"}) == {}  # executors elsewhere keep pyspark's daemon
    own = {"master": "local[2]", "conf": {"spark.python.daemon.module": "coverage_daemon"}}
    assert daemon_conf(tmp_path, own) == {"spark.python.daemon.module": "coverage_daemon"}  # the pipeline's own, alone


def test_the_daemon_and_the_driver_import_pyspark_from_the_installed_package_with_sparks_zips_first_on_their_path(
    tmp_path: Path,
) -> None:
    """As Spark starts them: its zips first on PYTHONPATH, then the job's files. pyspark comes from site-packages."""
    library = spark_submit.package_library(tmp_path / "lib.zip")
    env = {"PYTHONPATH": ":".join([*spark_zips(), str(library), str(JOBS)])}
    for first in ("python_daemon", "replay_job"):
        probe = f"import {first}, pyspark, py4j; print(pyspark.__file__, py4j.__file__)"
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout.split()
        assert out == [str(SITE / "__init__.py"), str(Path(py4j.__file__))], first
    plain = subprocess.run([sys.executable, "-c", "import pyspark; print(pyspark.__file__)"], env=env, capture_output=True, text=True)
    assert plain.stdout.strip() == f"{spark_zips()[0]}/pyspark/__init__.py"  # without them, the zip's


def test_a_task_turns_pages_into_arrow_without_importing_pandas_and_pandas_still_works_after() -> None:
    """pyarrow imports pandas (0.4 CPU-seconds) the first time it turns a list into an array, to rule out a pandas
    object: a task rules it out first. Without that, the same page imports pandas (the check can fail)."""
    probe = (
        "import sys\n"
        "from datetime import datetime, timezone\n"
        "import kinesis_source\n"
        "from kinesis_replay.adapters.attempt_writer import page_rows\n"
        "if sys.argv[1] == 'task':\n"
        "    kinesis_source.arrow_without_pandas()\n"
        "record = {'SequenceNumber': '1', 'ApproximateArrivalTimestamp': datetime.now(timezone.utc), 'Data': b'x', 'PartitionKey': 'k'}\n"
        "batch = page_rows('stream', 'shardId-000000000000', [record] * 3)\n"
        "print('pandas' in sys.modules, batch.num_rows, type(batch.to_pandas()).__name__)\n"
    )
    env = {"PYTHONPATH": os.pathsep.join(sys.path)}
    runs = {way: subprocess.run([sys.executable, "-c", probe, way], env=env, capture_output=True, text=True, check=True).stdout.split()
            for way in ("task", "plain")}  # fmt: skip
    assert runs == {"task": ["False", "3", "DataFrame"], "plain": ["True", "3", "DataFrame"]}


def test_a_tasks_large_blocks_go_back_to_the_system_once_freed_where_glibc_would_keep_them() -> None:
    """After a large block is freed, glibc serves the next ones from its heap and keeps them when freed below a block
    still in use; a task's setting has them mapped and unmapped. Without it, the same steps keep the block (the
    check can fail)."""
    probe = (
        "import sys\n"
        "import kinesis_source\n"
        "def resident():\n"
        "    return int(open('/proc/self/statm').read().split()[1]) * 4096\n"
        "if sys.argv[1] == 'task':\n"
        "    kinesis_source.return_large_blocks()\n"
        "first = b'x' * (16 << 20)\n"
        "del first\n"
        "block = b'y' * (4 << 20)\n"
        "pinned = b'z' * 4096\n"
        "before = resident()\n"
        "del block\n"
        "print((before - resident()) >> 20)\n"
    )
    env = {"PYTHONPATH": os.pathsep.join(sys.path)}
    returned = {way: int(subprocess.run([sys.executable, "-c", probe, way], env=env, capture_output=True, text=True, check=True).stdout)
                for way in ("task", "plain")}  # fmt: skip
    # Without the setting none of it comes back (0 MiB, or -1 once in make test: the process grew by a page meanwhile).
    assert returned["task"] >= 3 and returned["plain"] <= 0, returned


def test_the_workers_arrow_allocates_through_malloc_where_the_tasks_own_pool_does_not_reach() -> None:
    """A task puts pyarrow's allocations on malloc (``pa.set_memory_pool``), but Parquet's writer and reader take buffers
    from Arrow's own default pool, mimalloc, which keeps a heap per thread. The launchers give the workers the
    variable that makes that pool malloc too: with it, a task's Parquet write and read allocate nothing through mimalloc;
    without it, the same steps do (the check can fail)."""
    probe = (
        "import os, tempfile\n"
        "import pyarrow as pa, pyarrow.parquet as pq\n"
        "pa.set_memory_pool(pa.system_memory_pool())\n"
        "table = pa.table({'data': pa.array([os.urandom(1024) for _ in range(2000)], pa.binary())})\n"
        "with tempfile.TemporaryDirectory() as folder:\n"
        "    with pq.ParquetWriter(os.path.join(folder, 'f.parquet'), table.schema, compression='snappy') as writer:\n"
        "        writer.write_table(table)\n"
        "    assert pq.read_table(os.path.join(folder, 'f.parquet')).equals(table)\n"
        "print(pa.mimalloc_memory_pool().max_memory())\n"
    )
    prefix = "spark.executorEnv."
    workers = {key.removeprefix(prefix): value for key, value in DEFAULT_SPARK_CONF.items() if key.startswith(prefix)}
    assert workers == {"ARROW_DEFAULT_MEMORY_POOL": "system"}
    plain = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    through_mimalloc = {
        way: int(subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout)
        for way, env in (("launched", {**plain, **workers}), ("plain", plain))
    }
    assert through_mimalloc["launched"] == 0 and through_mimalloc["plain"] > 0, through_mimalloc

"""Start and stop the local AWS endpoints on 127.0.0.1: kinesalite (Kinesis) and the moto server (DynamoDB, S3).

    python tests/stack/local_stack.py start [--kinesis-port 4567] [--moto-port 5000]
    python tests/stack/local_stack.py env      # the variables that point boto3 and Airflow at them
    python tests/stack/local_stack.py stop

Both hold their data in memory only: stopping them forgets every stream and table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_STATE = HERE.parents[1] / ".stack"
REGION = "us-east-1"
# The emulators accept any credentials; these are not secrets, and real AWS never sees them.
LOCAL_KEY = "testing"


@dataclass(frozen=True)
class Stack:
    kinesis_url: str
    moto_url: str

    def connection(self) -> dict[str, object]:
        """The aws_default connection: per-service endpoint URLs in the extra's service_config."""
        return {
            "conn_type": "aws",
            "login": LOCAL_KEY,
            "password": LOCAL_KEY,
            "extra": {
                "region_name": REGION,
                "service_config": {
                    "kinesis": {"endpoint_url": self.kinesis_url},
                    "dynamodb": {"endpoint_url": self.moto_url},
                    "s3": {"endpoint_url": self.moto_url},
                    "emr-serverless": {"endpoint_url": self.moto_url},
                },
            },
        }

    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": LOCAL_KEY,
            "AWS_SECRET_ACCESS_KEY": LOCAL_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL_KINESIS": self.kinesis_url,
            "AWS_ENDPOINT_URL_DYNAMODB": self.moto_url,
            "AWS_ENDPOINT_URL_EMR_SERVERLESS": self.moto_url,
            "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(self.connection()),
        }


def s3_client() -> Any:
    """A test's own S3 client, at the aws_default connection's S3 endpoint: the environment names none, so that the
    library is seen to reach S3 through the connection alone, as in a DAG task."""
    import boto3

    connection = json.loads(os.environ["AIRFLOW_CONN_AWS_DEFAULT"])
    return boto3.client("s3", endpoint_url=connection["extra"]["service_config"]["s3"]["endpoint_url"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_http(url: str, timeout: float, what: str, proc: subprocess.Popen[bytes] | None = None, log: Path | None = None) -> None:
    """Wait until ``url`` answers; fail early, with the log's tail, if ``proc`` exits first."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
                tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
                raise RuntimeError(f"{what} did not answer at {url} within {timeout:.0f}s:\n{tail}") from None
            time.sleep(0.5)


def _wait_for_port(port: int, name: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode} while starting; see {log}:\n{log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{name} did not listen on 127.0.0.1:{port} within {timeout:.0f}s; see {log}")


def _spawn(name: str, command: list[str], state: Path) -> subprocess.Popen[bytes]:
    log = state / f"{name}.log"
    proc = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    (state / f"{name}.pid").write_text(str(proc.pid))
    return proc


# kinesalite 3.3.3 differs from Kinesis in three ways that planning relies on; each fix makes it answer as Kinesis does.
#
# 1. GetShardIterator(AT_TIMESTAMP) never answers when no record is that new: it waits for the first matching
#    record of a stream that has ended. Kinesis answers with an iterator at the tip. And it finds the record by
#    reading the shard from its first record, so a probe costs the emulator CPU in proportion to what the shard
#    holds (bench-planning measured 16.9 ms a shard holding 1 MiB and 76.5 ms at 10 MiB, most of a plan's CPU),
#    where Kinesis's cost does not grow with the backlog. The fix answers the tip when no record is that new, and
#    finds the first record at or after the timestamp by a binary search over the shard's sequence index: records
#    take their index in the order they arrive, so arrival times rise with it.
_AT_TIMESTAMP_SCAN = """      var opts = {
        gt: db.shardIxToHex(shardIx),
        lt: db.shardIxToHex(shardIx + 1),
      }
      return db.lazy(store.getStreamDb(data.StreamName).createReadStream(opts), cb)
        .filter(function(item) { return item.value.ApproximateArrivalTimestamp >= data.Timestamp })
"""
_AT_TIMESTAMP_HEAD = """        .head(function(item) {
          iteratorSeq = item.key.split('/')[1]
          cb(null, {ShardIterator: db.createShardIterator(data.StreamName, shardId, iteratorSeq)})
        })"""
_AT_TIMESTAMP_BUG = _AT_TIMESTAMP_SCAN + _AT_TIMESTAMP_HEAD
# What an earlier version of this module made of it (the tip when none is that new, still a scan): patched over too.
_AT_TIMESTAMP_TAKE = """        .take(1).join(function(items) {  // patched by kinesis-replay: an iterator at the tip when none is that new
          iteratorSeq = items.length ? items[0].key.split('/')[1] : db.stringifySequence({
            shardCreateTime: shardSeqObj.shardCreateTime,
            seqIx: stream._seqIx[Math.floor(shardIx / 5)],
            seqTime: now,
            shardIx: shardSeqObj.shardIx,
          })
          cb(null, {ShardIterator: db.createShardIterator(data.StreamName, shardId, iteratorSeq)})
        })"""
_AT_TIMESTAMP_EARLIER_FIX = _AT_TIMESTAMP_SCAN + _AT_TIMESTAMP_TAKE
_AT_TIMESTAMP_FIX = """      // patched by kinesis-replay: a binary search over the shard's sequence index; the tip when none is that new.
      // Records below index `low` arrived before the timestamp; `first` is the shard's first record at or after
      // index `high` (null: none), and it arrived at or after the timestamp.
      var streamDb = store.getStreamDb(data.StreamName), first = null,
        low = +shardSeqObj.seqIx || 0, high = +stream._seqIx[Math.floor(shardIx / 5)] || 0
      var keyAt = function(seqIx) {
        return db.shardIxToHex(shardIx) + '/' + db.stringifySequence({
          shardCreateTime: shardSeqObj.shardCreateTime, seqIx: seqIx, shardIx: shardSeqObj.shardIx,
        })
      }
      var search = function() {
        if (low >= high) {
          iteratorSeq = first ? first.key.split('/')[1] : db.stringifySequence({
            shardCreateTime: shardSeqObj.shardCreateTime,
            seqIx: stream._seqIx[Math.floor(shardIx / 5)],
            seqTime: now,
            shardIx: shardSeqObj.shardIx,
          })
          return cb(null, {ShardIterator: db.createShardIterator(data.StreamName, shardId, iteratorSeq)})
        }
        var mid = Math.floor((low + high) / 2)
        db.lazy(streamDb.createReadStream({gte: keyAt(mid), lt: db.shardIxToHex(shardIx + 1), limit: 1}), cb)
          .join(function(items) {
            if (items.length && items[0].value.ApproximateArrivalTimestamp < data.Timestamp) {
              low = +db.parseSequence(items[0].key.split('/')[1]).seqIx + 1
            } else {
              first = items.length ? items[0] : null
              high = mid
            }
            search()
          })
      }
      return search()"""

# 2. Its GetRecords always answers MillisBehindLatest 0 on an open shard. Kinesis answers how far the page
#    is from the tip; the fix measures it as other emulators do (kinesis-mock, for one): the arrival of the
#    shard's newest record less that of the page's last record, 0 when the page ends at the tip.
_MILLIS_BEHIND_BUG = """        cb(null, {
          MillisBehindLatest: millisBehind,
          NextShardIterator: nextShardIterator,
          Records: items.map(function(item) {
            delete item._seqObj
            delete item._tooOld
            return item
          }),
        })
"""
_MILLIS_BEHIND_FIX = """        var reply = function(millisBehind) { cb(null, {  // patched by kinesis-replay: an open shard's lag
          MillisBehindLatest: millisBehind,
          NextShardIterator: nextShardIterator,
          Records: items.map(function(item) {
            delete item._seqObj
            delete item._tooOld
            return item
          }),
        }) }
        if (!nextShardIterator || !items.length) return reply(millisBehind)
        var pageEnd = items[items.length - 1].ApproximateArrivalTimestamp
        db.lazy(streamDb.createReadStream({gt: db.shardIxToHex(shardIx), lt: db.shardIxToHex(shardIx + 1), reverse: true, limit: 1}), cb)
          .join(function(newest) {
            reply(newest.length ? Math.max(0, Math.round((newest[0].value.ApproximateArrivalTimestamp - pageEnd) * 1000)) : 0)
          })
"""

# 3. Every GetShardIterator and GetRecords call reads and parses the whole stream description, every shard's,
#    so a call to one shard of a 1,000-shard stream costs the emulator about 4 ms more CPU than one of a 100-shard
#    stream (measured: 3.7 ms and 8.1 ms a GetShardIterator and GetRecords pair): planning a wide stream then measures
#    kinesalite, not the planner. Kinesis serves a shard's calls at a cost that does not grow with the stream. The fix
#    keeps the parsed description for these two read-only calls; any write to the stream descriptions (a put,
#    a reshard, a status change) forgets it, and a read that began before a write never fills the cache.
_DESCRIPTION_READ = "function getStream(name, cb) {"
_DESCRIPTION_CACHE = """function getStreamCached(name, cb) {  // patched by kinesis-replay: the read-only calls' stream description
    if (Object.prototype.hasOwnProperty.call(streamCache, name)) return process.nextTick(cb, null, streamCache[name])
    var generation = cacheGeneration
    getStream(name, function(err, stream) {
      if (!err && generation == cacheGeneration) streamCache[name] = stream
      cb(err, stream)
    })
  }
  var streamCache = {}, cacheGeneration = 0
  function forgetStreams() { cacheGeneration++; streamCache = {} }
  ;['put', 'del', 'batch'].forEach(function(method) {
    var write = metaDb[method]
    metaDb[method] = function() {
      var args = Array.prototype.slice.call(arguments), last = args.length - 1
      forgetStreams()
      if (typeof args[last] == 'function') {
        var done = args[last]
        args[last] = function() { forgetStreams(); return done.apply(this, arguments) }
        return write.apply(metaDb, args)
      }
      var result = write.apply(metaDb, args)
      if (result && typeof result.then == 'function') result.then(forgetStreams, forgetStreams)
      return result
    }
  })

  function getStream(name, cb) {"""
_DESCRIPTION_EXPORT = """    getStream: getStream,
    recreate: recreate,"""
_DESCRIPTION_EXPORT_FIX = """    getStream: getStream,
    getStreamCached: getStreamCached,  // patched by kinesis-replay
    recreate: recreate,"""
_ITERATOR_DESCRIPTION = "  store.getStream(data.StreamName, function(err, stream) {"
_ITERATOR_DESCRIPTION_FIX = "  store.getStreamCached(data.StreamName, function(err, stream) {  // patched by kinesis-replay: read only"
_RECORDS_DESCRIPTION = "  store.getStream(streamName, function(err, stream) {"
_RECORDS_DESCRIPTION_FIX = "  store.getStreamCached(streamName, function(err, stream) {  // patched by kinesis-replay: read only"

# (file under kinesalite's root, what kinesalite 3.3.3 has (or an earlier fix made of it), what replaces it)
_PATCHES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("actions/getShardIterator.js", (_AT_TIMESTAMP_BUG, _AT_TIMESTAMP_EARLIER_FIX), _AT_TIMESTAMP_FIX),
    ("actions/getRecords.js", (_MILLIS_BEHIND_BUG,), _MILLIS_BEHIND_FIX),
    ("db/index.js", (_DESCRIPTION_READ,), _DESCRIPTION_CACHE),
    ("db/index.js", (_DESCRIPTION_EXPORT,), _DESCRIPTION_EXPORT_FIX),
    ("actions/getShardIterator.js", (_ITERATOR_DESCRIPTION,), _ITERATOR_DESCRIPTION_FIX),
    ("actions/getRecords.js", (_RECORDS_DESCRIPTION,), _RECORDS_DESCRIPTION_FIX),
)


def patch_kinesalite(root: Path = HERE / "node_modules" / "kinesalite") -> None:
    """Apply each fix once; fail loudly if kinesalite's source is not the one they were written for."""
    for name, known, fix in _PATCHES:
        source = root / name
        text = source.read_text()
        if fix in text:
            continue
        original = next((bug for bug in known if bug in text), None)
        if original is None:
            raise RuntimeError(f"{source} is not kinesalite 3.3.3's: review the fixes in {__file__}")
        source.write_text(text.replace(original, fix))


def kinesalite_command(port: int) -> list[str]:
    cli = HERE / "node_modules" / "kinesalite" / "cli.js"
    if not cli.exists():
        raise RuntimeError(f"kinesalite is not installed: run `npm ci --prefix {HERE}` (make does)")
    patch_kinesalite()
    # Stream changes take effect at once; the default limit of 10 shards is too few for resharding and 1,000-shard tests.
    return ["node", str(cli), "--port", str(port), "--shardLimit", "3000",
            "--createStreamMs", "0", "--deleteStreamMs", "0", "--updateStreamMs", "0"]  # fmt: skip


def start(state: Path = DEFAULT_STATE, kinesis_port: int = 4567, moto_port: int = 5000) -> Stack:
    """Start both endpoints (stopping any this state dir already runs) and wait until they listen."""
    stop(state)
    state.mkdir(parents=True, exist_ok=True)
    moto = [sys.executable, str(HERE / "moto_keepalive.py"), "-H", "127.0.0.1", "-p", str(moto_port)]
    procs = {
        "kinesalite": (_spawn("kinesalite", kinesalite_command(kinesis_port), state), kinesis_port),
        "moto": (_spawn("moto", moto, state), moto_port),
    }
    try:
        for name, (proc, port) in procs.items():
            _wait_for_port(port, name, proc, state / f"{name}.log")
    except BaseException:
        stop(state)
        raise
    stack = Stack(kinesis_url=f"http://127.0.0.1:{kinesis_port}", moto_url=f"http://127.0.0.1:{moto_port}")
    (state / "stack.json").write_text(json.dumps({"kinesis_url": stack.kinesis_url, "moto_url": stack.moto_url}))
    return stack


def load(state: Path = DEFAULT_STATE) -> Stack:
    path = state / "stack.json"
    if not path.exists():
        raise RuntimeError(f"no local stack is running from {state}: start it first")
    return Stack(**json.loads(path.read_text()))


def _reaped(pid: int) -> bool:
    """Reap ``pid`` if it is our child and has exited: an unreaped child still answers kill(pid, 0)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False  # not our child (started by another process): kill(pid, 0) tells
    return done == pid


def stop(state: Path = DEFAULT_STATE) -> list[str]:
    """Stop what start() started from this state dir; returns the names it stopped."""
    stopped = []
    for pid_file in sorted(state.glob("*.pid")):
        pid = int(pid_file.read_text())
        try:
            os.killpg(pid, signal.SIGTERM)
            for _ in range(50):
                if _reaped(pid):
                    break
                os.kill(pid, 0)
                time.sleep(0.1)
            else:
                os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        pid_file.unlink()
        stopped.append(pid_file.stem)
    (state / "stack.json").unlink(missing_ok=True)
    return stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["start", "stop", "env"])
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE)
    parser.add_argument("--kinesis-port", type=int, default=int(os.environ.get("KINESIS_PORT", 4567)))
    parser.add_argument("--moto-port", type=int, default=int(os.environ.get("MOTO_PORT", 5000)))
    args = parser.parse_args(argv)
    if args.command == "start":
        stack = start(args.state_dir, args.kinesis_port, args.moto_port)
        print(f"kinesalite (Kinesis) at {stack.kinesis_url}, moto (DynamoDB, S3) at {stack.moto_url}")
    elif args.command == "stop":
        print("stopped: " + (", ".join(stop(args.state_dir)) or "nothing was running"))
    else:
        for key, value in load(args.state_dir).env().items():
            print(f"export {key}='{value}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())

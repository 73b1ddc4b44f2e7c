"""``python -m connectors`` (also the ``connectors`` command): look inside running pipelines.

  connectors offsets CHECKPOINT          source offsets and batch status of a query checkpoint
  connectors lag --bootstrap-servers B --group G [--topic T]
                                         a Kafka consumer group's lag per partition
  connectors abort-transactions --bootstrap-servers B --prefix P [--partitions N]
                                         abort the open transactions a stopped exactly-once
                                         Kafka sink left (transactionalIdPrefix P)
  connectors files PATH [--storage-options JSON]
                                         a file sink's in-progress, pending and finished parts
  connectors finish PATH [--storage-options JSON]
                                         publish the parts a stopped file-sink query left open
"""

from __future__ import annotations

import argparse
import json
import sys

from connectors import __version__
from connectors.core.checkpoint import read_checkpoint
from connectors.core.filesystem import parse_storage_options

# [project] name in pyproject.toml (the wheel test checks they agree); imported as `connectors`.
DISTRIBUTION = "pyspark-flink-connectors"

def cmd_offsets(args: argparse.Namespace) -> int:
    state = read_checkpoint(args.checkpoint)
    print(f"query id:        {state.query_id}")
    print(f"last planned:    batch {state.last_planned}")
    print(f"last committed:  batch {state.last_committed}")
    if state.pending_batch is not None:
        print(f"pending:         batch {state.pending_batch} (re-run on restart)")
    for index, offset in enumerate(state.source_offsets):
        print(f"source {index}:        {json.dumps(offset, sort_keys=True)}")
    return 0


def cmd_lag(args: argparse.Namespace) -> int:
    from connectors.tools.lag import group_lag

    rows = group_lag(args.bootstrap_servers, args.group, args.topic)
    if not rows:
        print(f"group {args.group!r} has no committed offsets")
        return 0
    print(f"{'topic':<30} {'partition':>9} {'committed':>12} {'end':>12} {'lag':>10}")
    for row in rows:
        print(f"{row.topic:<30} {row.partition:>9} {row.committed:>12} {row.end:>12} {row.lag:>10}")
    print(f"total lag: {sum(row.lag for row in rows)}")
    return 0


def cmd_abort_transactions(args: argparse.Namespace) -> int:
    from connectors.kafka.sink.options import KafkaSinkOptions
    from connectors.kafka.sink.producer import KafkaSinkError
    from connectors.kafka.sink.recovery import abort_lingering, progress_partitions

    options = KafkaSinkOptions.from_options({
        "kafka.bootstrap.servers": args.bootstrap_servers, "deliveryGuarantee": "exactly-once",
        "transactionalIdPrefix": args.prefix,
    })
    try:
        ids = abort_lingering(options, progress_partitions(options), args.partitions)
    except KafkaSinkError as exc:
        print(f"connectors abort-transactions: {exc}", file=sys.stderr)
        return 1
    if not ids:
        print(f"no transactional id of prefix {args.prefix!r} found (no progress group '{args.prefix}-<partition>'); "
              "--partitions N initializes <prefix>-0 .. <prefix>-(N-1)")
    else:
        print(f"initialized {len(ids)} transactional ids, {ids[0]} .. {ids[-1]}: their open transactions are aborted")
    return 0


def cmd_files(args: argparse.Namespace) -> int:
    from connectors.tools.file_sink import status

    queries, finished = status(args.path, args.storage_options)
    for query in queries:
        print(f"query {query.query}: last committed batch {query.batch}")
        for state, parts in (("in-progress", query.in_progress), ("pending", query.pending)):
            for part in parts:
                print(f"  {state:<12} {part.final}  {part.size:,} bytes committed")
    print(f"finished part files: {finished}")
    return 0


def cmd_finish(args: argparse.Namespace) -> int:
    from connectors.tools.file_sink import finish

    print(f"published {finish(args.path, args.storage_options)} part(s) under {args.path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="connectors", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"{DISTRIBUTION} {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    offsets = commands.add_parser("offsets", help="a query checkpoint's source offsets")
    offsets.add_argument("checkpoint")
    offsets.set_defaults(run=cmd_offsets)
    lag = commands.add_parser("lag", help="a Kafka consumer group's lag")
    lag.add_argument("--bootstrap-servers", required=True)
    lag.add_argument("--group", required=True)
    lag.add_argument("--topic", help="only this topic")
    lag.set_defaults(run=cmd_lag)
    abort = commands.add_parser("abort-transactions",
                                help="abort the open transactions of a stopped exactly-once Kafka sink")
    abort.add_argument("--bootstrap-servers", required=True)
    abort.add_argument("--prefix", required=True, help="the sink's transactionalIdPrefix")
    abort.add_argument("--partitions", type=int, default=0,
                       help="also initialize <prefix>-0 .. <prefix>-(N-1), which may lack a progress group")
    abort.set_defaults(run=cmd_abort_transactions)
    for name, run, text in (("files", cmd_files, "a file sink's parts"),
                            ("finish", cmd_finish, "publish a stopped file sink's open parts")):
        command = commands.add_parser(name, help=text)
        command.add_argument("path", help="the sink's base path (a directory or an fsspec URL)")
        command.add_argument("--storage-options", type=parse_storage_options, default=None,
                             help="JSON object of fsspec filesystem arguments (endpoint, credentials)")
        command.set_defaults(run=run)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (FileNotFoundError, ValueError) as exc:
        print(f"connectors {args.command}: {exc}", file=sys.stderr)
        return 2

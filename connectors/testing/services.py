"""Where the tests' Kafka, PostgreSQL and Schema Registry come from: the one place that decides.

In order: the ``KAFKA_BOOTSTRAP_SERVERS`` / ``POSTGRES_DSN`` / ``SCHEMA_REGISTRY_URL``
environment variables; else testcontainers when a Docker engine answers; else the local
launchers (a Kafka broker and Apicurio Registry fetched with mvn, Debian's PostgreSQL), which
outlive this process and are reused by later ones.

``python -m connectors.testing.services start`` prints three ``export`` lines for a shell to
``eval``; ``python -m connectors.testing.services stop`` stops the local servers.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import re
import shlex
import socket
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from connectors.testing import kafka_broker, postgres_server, schema_registry
from connectors.testing.kafka_broker import KafkaBroker
from connectors.testing.local_service import LocalService, free_ports, log
from connectors.testing.postgres_server import PostgresServer
from connectors.testing.schema_registry import SchemaRegistry

KAFKA_IMAGE = f"apache/kafka:{kafka_broker.KAFKA_VERSION}"
POSTGRES_IMAGE = "postgres:15"  # the major Debian 12 (bookworm) gives the local launcher
SCHEMA_REGISTRY_IMAGE = f"apicurio/apicurio-registry:{schema_registry.APICURIO_VERSION}"

# Started by this process, with their addresses; testcontainers' reaper removes them when it exits.
_containers: dict[str, tuple[Any, str]] = {}


def kafka_bootstrap_servers(*, persistent: bool = False) -> str:
    """Bootstrap servers of a Kafka broker with transactions enabled.

    ``persistent`` skips testcontainers, whose containers die with this process.
    """
    return _resolve("KAFKA_BOOTSTRAP_SERVERS", _kafka_container, KafkaBroker, persistent)


def postgres_dsn(*, persistent: bool = False) -> str:
    """DSN ``postgresql://user:password@host:port/db`` of a PostgreSQL server allowing prepared transactions.

    ``persistent`` skips testcontainers, whose containers die with this process.
    """
    return _resolve("POSTGRES_DSN", _postgres_container, PostgresServer, persistent)


def schema_registry_url(*, persistent: bool = False) -> str:
    """URL ``http://host:port/apis/ccompat/v7`` of a Confluent-compatible Schema Registry (Apicurio's).

    It is what confluent-kafka's ``SchemaRegistryClient({"url": ...})`` takes. ``persistent``
    skips testcontainers, whose containers die with this process.
    """
    return _resolve("SCHEMA_REGISTRY_URL", _schema_registry_container, SchemaRegistry, persistent)


def stop_all() -> None:
    """Stop the containers this process started and the local servers (shared by every process)."""
    while _containers:
        _containers.popitem()[1][0].stop()
    for service in (KafkaBroker(), PostgresServer(), SchemaRegistry()):
        service.stop()


def _resolve(env_var: str, container: Callable[[], str], launcher: type[LocalService], persistent: bool) -> str:
    if address := os.environ.get(env_var):
        log.info("%s from $%s: %s", launcher.name, env_var, address)
        return address
    if not persistent and _docker_answers():
        return container()
    return launcher().start()


@functools.cache
def _docker_answers() -> bool:
    """Whether a Docker engine accepts connections at $DOCKER_HOST (default: its unix socket).

    A bare connect, because the docker SDK leaks a socket when no engine is there.
    """
    host = urlsplit(os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"))
    try:
        if host.scheme == "unix":
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(2)
                sock.connect(host.path)
        else:
            with socket.create_connection((host.hostname, host.port or 2375), timeout=2):
                pass
    except (OSError, ValueError):
        return False
    return True


def _kafka_container() -> str:
    if "kafka" not in _containers:
        from testcontainers.core.container import DockerContainer

        # The broker advertises the address clients must use, so the host port is chosen
        # up front and mapped to the same port inside the container.
        port, controller_port = free_ports(2)
        settings = kafka_broker.SETTINGS | {
            "listeners": f"PLAINTEXT://:{port},CONTROLLER://:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://localhost:{port}",
            "controller.quorum.voters": f"1@localhost:{controller_port}",
        }
        env = {"KAFKA_" + key.upper().replace(".", "_"): value for key, value in settings.items()}
        log.info("starting a %s container", KAFKA_IMAGE)
        container = DockerContainer(KAFKA_IMAGE).with_bind_ports(port, port).with_envs(**env).start()
        address = f"localhost:{port}"
        _containers["kafka"] = (container, address)
        _wait_for(KAFKA_IMAGE, address, kafka_broker.answers)
    return _containers["kafka"][1]


def _postgres_container() -> str:
    if "postgres" not in _containers:
        with warnings.catch_warnings():  # newer releases moved it to testcontainers.community
            warnings.simplefilter("ignore", DeprecationWarning)
            from testcontainers.postgres import PostgresContainer

        settings = [arg for key, value in postgres_server.SETTINGS.items() for arg in ("-c", f"{key}={value}")]
        log.info("starting a %s container", POSTGRES_IMAGE)
        container = PostgresContainer(
            POSTGRES_IMAGE,
            username=postgres_server.USER,
            password=postgres_server.PASSWORD,
            dbname=postgres_server.DATABASE,
            driver=None,
        ).with_command(["postgres", *settings])
        container.start()  # waits until it accepts connections
        _containers["postgres"] = (container, container.get_connection_url())
    return _containers["postgres"][1]


def _schema_registry_container() -> str:
    if "schema-registry" not in _containers:
        from testcontainers.core.container import DockerContainer

        # Quarkus reads a property from the environment under its upper-cased, underscored name.
        env = {re.sub(r"[.-]", "_", key).upper(): value for key, value in schema_registry.SETTINGS.items()}
        log.info("starting a %s container", SCHEMA_REGISTRY_IMAGE)
        container = DockerContainer(SCHEMA_REGISTRY_IMAGE).with_exposed_ports(8080).with_envs(**env).start()
        host, port = container.get_container_host_ip(), container.get_exposed_port(8080)
        url = f"http://{host}:{port}{schema_registry.CCOMPAT_PATH}"
        _containers["schema-registry"] = (container, url)
        _wait_for(SCHEMA_REGISTRY_IMAGE, url, schema_registry.answers)
    return _containers["schema-registry"][1]


def _wait_for(image: str, address: str, answers: Callable[[str], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not answers(address):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {image} container did not answer at {address} within {timeout:.0f} s")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> None:
    prog = "python -m connectors.testing.services"
    parser = argparse.ArgumentParser(prog=prog, description="Start or stop the local test services.")
    parser.add_argument("command", choices=["start", "stop"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if args.command == "start":
        bootstrap, dsn = kafka_bootstrap_servers(persistent=True), postgres_dsn(persistent=True)
        registry = schema_registry_url(persistent=True)
        print(f"export KAFKA_BOOTSTRAP_SERVERS={shlex.quote(bootstrap)}")
        print(f"export POSTGRES_DSN={shlex.quote(dsn)}")
        print(f"export SCHEMA_REGISTRY_URL={shlex.quote(registry)}")
    else:
        stop_all()


if __name__ == "__main__":
    main()

"""``kafka.*`` options -> confluent-kafka (librdkafka) configuration, shared by source and sink.

Like Spark, every option starting with ``kafka.`` goes to the client with the prefix removed.
The client is librdkafka, not the Java client: a Java-only property gets an error that names the
librdkafka property to use instead, rather than a cryptic "No such configuration property".
Every client the connectors open logs through Python logging (:func:`with_logger`), and a setting
librdkafka refuses fails at query start naming the ``kafka.*`` option and its value
(:func:`refusal`). Topic names are checked here too, for the source's ``subscribe`` and the
sink's ``topic`` alike.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaException

from connectors.core.options import OptionError, is_secret_name, scrub

PREFIX = "kafka."

# librdkafka's own log lines (a broker connection refused, a coordinator still loading, ...) are
# retried or surface as the connectors' own errors: they go to this logger, at librdkafka's level
# (3 -> ERROR, 4 -> WARNING, 6 -> INFO, 7 -> DEBUG), shown where the application configures
# logging and silent where it does not, instead of written raw to the process's stderr.
LIBRDKAFKA_LOG = logging.getLogger("connectors.kafka.librdkafka")
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())

# Java client property -> what to use with librdkafka instead.
JAVA_ONLY = {
    "sasl.jaas.config": "kafka.sasl.username and kafka.sasl.password (with kafka.sasl.mechanism)",
    "ssl.truststore.location": "kafka.ssl.ca.location (a PEM file)",
    "ssl.truststore.password": "kafka.ssl.ca.location (a PEM file needs no password)",
    "ssl.truststore.type": "kafka.ssl.ca.location (a PEM file)",
    "ssl.keystore.type": "kafka.ssl.keystore.location (PKCS#12) or kafka.ssl.certificate.location",
    "ssl.key.password": "kafka.ssl.key.password is not used with PKCS#12; use kafka.ssl.keystore.password",
    "security.providers": "nothing (librdkafka uses OpenSSL)",
    "key.serializer": "nothing: keys are written as bytes",
    "value.serializer": "nothing: values are written as bytes",
    "key.deserializer": "nothing: keys are read as bytes",
    "value.deserializer": "nothing: values are read as bytes",
    "interceptor.classes": "nothing: Java interceptors cannot run in librdkafka",
    "partitioner.class": "kafka.partitioner (e.g. murmur2_random, as the Java client's default)",
    "max.block.ms": "kafka.socket.timeout.ms or kafka.message.timeout.ms",
    "buffer.memory": "kafka.queue.buffering.max.kbytes",
    "max.poll.records": "nothing: the reader sizes its own batches",
    "default.api.timeout.ms": "kafka.socket.timeout.ms",
    "fetch.max.wait.ms": "kafka.fetch.wait.max.ms",
    "receive.buffer.bytes": "kafka.socket.receive.buffer.bytes",
    "send.buffer.bytes": "kafka.socket.send.buffer.bytes",
    "exclude.internal.topics": "nothing: subscribePattern never matches Kafka's internal topics",
}

# Kafka's own (org.apache.kafka.common.internals.Topic.INTERNAL_TOPICS in 4.1): what its admin client
# leaves out of a topic listing, and so Spark's subscribePattern. A user topic named "__x" is not one.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_TOPIC_RULE = "1 to 249 of the characters a-z A-Z 0-9 . _ -"


def parse_topic(text: str) -> str:
    if not _TOPIC_NAME.match(text):
        raise ValueError(f"expected a Kafka topic name: {_TOPIC_RULE}")
    return text


def topic_names(topics: tuple[str, ...]) -> None:
    """Check that each of ``topics`` can name a Kafka topic: one that cannot exist (``a;b``, a
    list not separated by commas) was subscribed to without a word and never read."""
    bad = [topic for topic in topics if not _TOPIC_NAME.match(topic)]
    if bad:
        raise ValueError(f"{', '.join(map(repr, bad))}: expected comma-separated Kafka topic names, each {_TOPIC_RULE}")


def client_config(source: str, options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` entries of ``options`` as a librdkafka config dict (prefix removed).

    ``source`` names the format in errors. Raises OptionError for a Java-only property.
    """
    config: dict[str, str] = {}
    for key, value in options.items():
        if not key.lower().startswith(PREFIX):
            continue
        name = key[len(PREFIX):]
        if name.lower() in JAVA_ONLY:
            raise OptionError(source, key, None, f"is a Java client property; use {JAVA_ONLY[name.lower()]}")
        config[name] = value
    if "bootstrap.servers" not in config:
        raise OptionError(source, "kafka.bootstrap.servers", None, "required option is missing")
    if not config["bootstrap.servers"].strip():  # librdkafka waited out its socket timeout, then "transport failure"
        raise OptionError(source, "kafka.bootstrap.servers", config["bootstrap.servers"],
                          "expected host:port of one or more brokers, comma-separated")
    return config


def with_logger(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` for a confluent-kafka client whose log lines go to :data:`LIBRDKAFKA_LOG`.

    Not with ``kafka.debug``: who asks librdkafka for debug output gets it where librdkafka
    writes it, the process's stderr (the executor's log in a Spark task), as with any client.
    """
    return dict(config) if "debug" in config else {**config, "logger": LIBRDKAFKA_LOG}


def refusal(source: str, options: Mapping[str, str], settings: Mapping[str, Any], error: KafkaException,
            make: Callable[[dict[str, Any]], Any]) -> OptionError:
    """The OptionError for librdkafka refusing to create a client (``make``) from ``settings``,
    which include the ``kafka.*`` ``options``. librdkafka names only its own property, often an
    alias (``fetch.message.max.bytes`` for ``max.partition.fetch.bytes``), and not always the
    value; this names the user's options: the first refused on its own for the same reason, else
    those without which the refusal changes (``kafka.acks=1`` beside the idempotence the sink turns
    on), narrowed to the one whose name or value the reason quotes, if exactly one does: a bad
    ``kafka.sasl.mechanism`` is refused only beside a SASL ``kafka.security.protocol``, which
    without it is refused too, for librdkafka's default mechanism (GSSAPI, not built in).
    Trial clients get no ``bootstrap.servers``, so they open no connection.
    """
    user = {key: value for key, value in options.items()
            if key.lower().startswith(PREFIX) and key.lower() != "kafka.bootstrap.servers"}
    secrets = [value for key, value in user.items() if is_secret_name(key)]
    reason = scrub(error.args[0].str(), secrets)

    def without(keys: list[str]) -> dict[str, Any]:
        names = {key[len(PREFIX):].lower() for key in keys} | {"bootstrap.servers"}
        return {name: value for name, value in settings.items() if name.lower() not in names}

    def refusal_of(trial: dict[str, Any]) -> str | None:
        """Why librdkafka refuses ``trial``, or None."""
        try:
            client = make(with_logger(trial))
        except KafkaException as exc:
            return scrub(exc.args[0].str(), secrets)
        except ValueError as exc:
            return scrub(str(exc), secrets)
        if hasattr(client, "close"):
            client.close()
        return None

    def quoted(key: str) -> bool:
        words = [key[len(PREFIX):]] + ([] if is_secret_name(key) else [user[key]])
        return any(word and re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w.-])", reason, re.IGNORECASE)
                   for word in words)

    base = without(list(user))
    alone = next((key for key, value in user.items() if refusal_of({**base, key[len(PREFIX):]: value}) == reason),
                 None)
    culprits = [alone] if alone else [key for key in user if refusal_of(without([key])) != reason]
    named = [key for key in culprits if quoted(key)]
    culprits = named if len(named) == 1 else culprits
    if len(culprits) == 1:
        # As with our own unknown options, an unknown name's value is never shown: it may be a
        # misspelt secret (kafka.sasl.pasword).
        unknown = "No such configuration property" in reason
        return OptionError(source, culprits[0], user[culprits[0]], f"librdkafka refuses it: {reason}", secret=unknown)
    together = ", ".join(culprits) or "kafka.*"
    return OptionError(source, together, None, f"librdkafka refuses these settings together: {reason}")

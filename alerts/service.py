"""``netmon alerts run``: consume the result topics, evaluate the rules, write the outbox, deliver.

One batch of result rows at a time:

1. ``poll`` the result topics (``<prefix><kind>`` for every kind some rule reads) in the consumer
   group ``[alerts] group_id``;
2. skip rows the outbox already covers (a crash after step 3 re-delivers them), feed the rest to
   the :class:`~alerts.rules.RuleEngine` in partition order;
3. write the notifications, their routed deliveries, the changed alert episodes, the engine's
   state and the next offsets to the outbox in **one SQLite transaction**;
4. only then commit the offsets to Kafka, and wake the delivery threads.

A malformed row (a ``netmon.kind`` header that is not UTF-8, a value that is not JSON or not a
JSON object, a time column that is not a time, an unknown result version) is skipped: counted per
reason in the outbox with the batch (``netmon alerts status``), logged once per reason, and its
offset advances like any other row's, so the next good row still alerts.

So a crash anywhere loses no alert (offsets are never committed ahead of the outbox) and
duplicates none (the outbox's offsets and state are committed together; a restart resumes from
them). The group uses static membership (``group_instance_id`` from the state directory), so a
restarted service takes its partitions back at once instead of waiting for the old session
to expire. Run one service per state directory.

At start the targets are checked (:func:`alerts.delivery.check_targets`): a ``secret_env``
naming an unset variable is a :class:`~netmon.config.ConfigError`, an unsigned target a
warning. Delivered and dead deliveries older than ``[alerts] keep_days`` are pruned at start and
every :data:`PRUNE_EVERY_S` seconds.

Testing hook: with ``NETMON_ALERTS_CRASH_BEFORE_COMMIT=1`` in the environment the process exits
abruptly (``os._exit(86)``) right after the first outbox write that added events, before the
Kafka commit — the crash the durability test needs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka import ConsumerRebalanceListener

from alerts.defaults import effective_rules, service_builtin
from alerts.delivery import Deliverer, check_targets, routes
from alerts.outbox import Outbox, outbox_path
from alerts.rules import Notification, RowError, RuleEngine
from netmon.config import AlertRule, AlertsConfig, Config
from netmon.results import message_rows, result_topic

__all__ = ["CRASH_ENV", "PRUNE_EVERY_S", "AlertService", "BatchResult", "result_topic"]

log = logging.getLogger(__name__)

CRASH_ENV = "NETMON_ALERTS_CRASH_BEFORE_COMMIT"
CRASH_EXIT_CODE = 86
#: how often the running service prunes the outbox (``[alerts] keep_days``)
PRUNE_EVERY_S = 3600.0


@dataclass
class BatchResult:
    #: rows evaluated
    rows: int = 0
    #: messages the outbox already covered (re-delivered after a crash; a message holds rows)
    skipped: int = 0
    notifications: int = 0
    #: malformed rows skipped (counted per reason in the outbox)
    bad: int = 0
    #: rows of queries no rule reads, skipped unparsed (totals only)
    unread: int = 0


class AlertService:
    """The evaluation loop and the delivery threads of ``netmon alerts run``.

    Parameters
    ----------
    cfg
        netmon's configuration (Kafka, state directory).
    alerts
        The ``[alerts]`` section (``netmon.config.alerts_config(cfg)``).
    rules
        The rules to evaluate (default: :func:`alerts.defaults.effective_rules` of the service's
        built-in rules, :func:`alerts.defaults.service_builtin`: the detection rules when the
        pipeline publishes the ``features`` kind).
    """

    def __init__(
        self, cfg: Config, alerts: AlertsConfig, *, rules: Sequence[AlertRule] | None = None
    ) -> None:
        self.cfg = cfg
        self.alerts = alerts
        self.rules = tuple(effective_rules(alerts, service_builtin(cfg)) if rules is None else rules)
        self.path = outbox_path(cfg.paths.state_dir)
        self.deliverer = Deliverer(self.path, alerts)
        self.totals = BatchResult()
        self._outbox: Outbox | None = None
        self._engine: RuleEngine | None = None
        self._consumer: Any = None
        self._next: dict[tuple[str, int], int] = {}
        self._topics: dict[str, str] = {}
        self._logged_problems: set[str] = set()
        self._logged_skips: set[str] = set()
        self._query_needles: dict[str, tuple[bytes, ...] | None] = {}
        self._next_prune = 0.0
        self._crash = os.environ.get(CRASH_ENV) == "1"

    # --- lifecycle ----------------------------------------------------------------------------

    def check(self) -> None:
        """Check the targets: raise ConfigError for a secret_env naming an unset variable, warn
        about each unsigned target."""
        for name in check_targets(self.alerts):
            log.warning(
                "alert target has no secret: its webhooks are sent unsigned",
                extra={"target": name, "hint": "set secret or secret_env (docs/alerts.md)"},
            )

    def open(self, consumer: Any = None) -> AlertService:
        """Check the targets, open (and prune) the outbox, restore the engine, join the consumer group.

        ``consumer``: a ready consumer to read from instead of joining the group (tests).
        """
        self.check()
        self._outbox = Outbox(self.path)
        self.prune()
        self._engine = RuleEngine.restore(self.rules, self._outbox.load_state())
        self._next = self._outbox.offsets()
        self._topics = {result_topic(self.cfg, kind): kind for kind in self._engine.kinds}
        if not self._topics:
            log.warning("no enabled alert rules: nothing to evaluate")
            return self
        if consumer is not None:
            self._consumer = consumer
            return self
        from kafka import KafkaConsumer

        from netmon.kafka_admin import ensure_topic
        from netmon.kafka_security import client_options

        # [kafka] authentication and TLS (ConfigError when the password variable is unset)
        security = client_options(self.cfg.kafka)
        for topic in self._topics:
            ensure_topic(
                self.cfg.kafka.bootstrap,
                topic,
                self.cfg.kafka.partitions,
                self.cfg.kafka.replication_factor,
                security=security,
                min_insync_replicas=self.cfg.kafka.min_insync_replicas,
            )
        instance = hashlib.blake2b(str(Path(self.cfg.paths.state_dir).resolve()).encode(), digest_size=6)
        self._consumer = KafkaConsumer(
            bootstrap_servers=self.cfg.kafka.bootstrap,
            group_id=self.alerts.group_id,
            group_instance_id=f"{self.alerts.group_id}-{instance.hexdigest()}",
            client_id="netmon-alerts",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=500,
            **security,
        )
        self._consumer.subscribe(sorted(self._topics), listener=_SeekToOutbox(self))
        return self

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._outbox is not None:
            self._outbox.close()
            self._outbox = None

    # --- one batch ----------------------------------------------------------------------------

    def poll_once(self, timeout_s: float | None = None) -> BatchResult:
        """Read, evaluate and durably record one batch of result rows.

        A malformed row never escapes as an exception: it is skipped, counted and logged once per
        reason, and its offset is recorded like a good row's.
        """
        if self._consumer is None or self._outbox is None or self._engine is None:
            time.sleep(self.alerts.poll_s if timeout_s is None else timeout_s)
            return BatchResult()
        timeout_ms = int(1000 * (self.alerts.poll_s if timeout_s is None else timeout_s))
        polled = self._consumer.poll(timeout_ms=timeout_ms)
        result = BatchResult()
        notifications: list[Notification] = []
        offsets: dict[tuple[str, int], int] = {}
        skipped: dict[str, tuple[int, str]] = {}
        for tp, records in sorted(polled.items(), key=lambda item: (item[0].topic, item[0].partition)):
            key = (tp.topic, tp.partition)
            for record in records:
                if record.offset < self._next.get(key, 0):
                    result.skipped += 1  # already in the outbox (re-delivered after a crash)
                    continue
                offsets[key] = record.offset + 1
                for problem in self._evaluate(tp.topic, record, notifications):
                    if problem is None:
                        result.rows += 1
                        continue
                    result.bad += 1
                    where = f"{tp.topic}[{tp.partition}]@{record.offset}"
                    skipped[problem] = (skipped.get(problem, (0, ""))[0] + 1, where)
                    if problem not in self._logged_skips:  # once per reason: a bad producer is not a flood
                        self._logged_skips.add(problem)
                        log.warning(
                            "malformed result row skipped (logged once per reason; counted in the outbox)",
                            extra={
                                "reason": problem,
                                "topic": tp.topic,
                                "partition": tp.partition,
                                "offset": record.offset,
                            },
                        )
        if not offsets:
            return result
        self._record(notifications, offsets, skipped)
        result.notifications = len(notifications)
        self.totals.rows += result.rows
        self.totals.skipped += result.skipped
        self.totals.bad += result.bad
        self.totals.notifications += result.notifications
        return result

    def _evaluate(self, topic: str, record: Any, notifications: list[Notification]) -> list[str | None]:
        """Decode one record and feed its rows to the engine; per row None, or why it was skipped."""
        assert self._engine is not None
        kind, texts, problem = self._decode(topic, record)
        if texts is None:
            return [problem]
        needles = self._needles(kind) if len(texts) > 1 else None
        if needles is not None:
            # Rows of queries no rule reads are most of a replayed day (every top-k and distinct
            # query reports every slide): a message of several rows (version 2, JSON Lines) skips
            # them before parsing. A row of query q holds q as a JSON string, as json.dumps writes
            # it (ASCII escapes: netmon's publisher) or plain; a row without one changes nothing.
            wanted = [t for t in texts if any(n in t for n in needles)]
            self.totals.unread += len(texts) - len(wanted)
            texts = wanted
        return [self._observe(kind, text, topic, notifications) for text in texts]

    def _needles(self, kind: str) -> tuple[bytes, ...] | None:
        if kind not in self._query_needles:
            assert self._engine is not None
            queries = self._engine.queries(kind)
            self._query_needles[kind] = (
                None
                if queries is None
                else tuple({json.dumps(q, ensure_ascii=a).encode() for q in queries for a in (True, False)})
            )
        return self._query_needles[kind]

    def _observe(self, kind: str, text: bytes, topic: str, notifications: list[Notification]) -> str | None:
        assert self._engine is not None
        try:
            row = json.loads(text)
        except RecursionError:
            return "value is not JSON (nested too deeply)"
        except (TypeError, ValueError):
            return "value is not JSON"
        if not isinstance(row, dict):
            return "value is not a JSON object"
        try:
            notifications += self._engine.observe(kind, row)
            return None
        except RowError as exc:
            return exc.reason
        except Exception as exc:  # noqa: BLE001 - no row may stop the service (the engine guards rules)
            reason = f"evaluation failed ({type(exc).__name__})"
            if reason not in self._logged_skips:
                log.warning("result row could not be evaluated", exc_info=True, extra={"topic": topic})
            return reason

    def _decode(self, topic: str, record: Any) -> tuple[str, list[bytes] | None, str]:
        """(kind, the rows' JSON texts, "") or (kind, None, why the record is skipped); never raises
        for bad input. Version 2 messages carry several rows (JSON Lines), version 1 one."""
        kind = self._topics.get(topic, "")
        try:
            headers = {str(k): bytes(v or b"") for k, v in (record.headers or [])}
        except (TypeError, ValueError):
            return kind, None, "headers are malformed"
        raw_kind = headers.get("netmon.kind")
        if raw_kind:
            try:
                kind = raw_kind.decode()
            except UnicodeDecodeError:
                return kind, None, "netmon.kind header is not UTF-8"
        try:
            return kind, message_rows(record.value, headers.get("netmon.result-version")), ""
        except (TypeError, ValueError) as exc:
            return kind, None, str(exc)

    def _record(
        self,
        notifications: list[Notification],
        offsets: dict[tuple[str, int], int],
        skipped: dict[str, tuple[int, str]] | None = None,
    ) -> None:
        assert self._outbox is not None and self._engine is not None
        engine = self._engine
        problems = {name: (p.message, p.count) for name, p in engine.problems.items()}
        for name, (message, _) in problems.items():
            if name not in self._logged_problems:
                self._logged_problems.add(name)
                log.warning("alert rule cannot be evaluated", extra={"rule": name, "problem": message})
        new = self._outbox.commit_batch(
            notifications=notifications,
            routes={n.event_id: routes(self.alerts.targets, n) for n in notifications},
            records=engine.take_changes(),
            state=engine.snapshot(),
            offsets=offsets,
            problems=problems,
            skipped=skipped,
        )
        self._next.update(offsets)
        for n in notifications:
            log.info("alert %s", n.status, extra={"rule": n.rule, "event_id": n.event_id})
        if new and self._crash:
            os._exit(CRASH_EXIT_CODE)  # the test hook: outbox written, Kafka offsets not committed
        self._commit(offsets)
        if new:
            self.deliverer.wake()

    def _commit(self, offsets: dict[tuple[str, int], int]) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        try:
            self._consumer.commit(
                {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}
            )
        except Exception as exc:  # noqa: BLE001 - the outbox holds the offsets; Kafka's copy can lag
            log.warning("committing Kafka offsets failed (the outbox has them)", extra={"error": str(exc)})

    def prune(self, now: float | None = None) -> dict[str, int]:
        """Delete outbox rows older than ``[alerts] keep_days`` (see :meth:`Outbox.prune`)."""
        if self._outbox is None:
            return {}
        self._next_prune = time.monotonic() + PRUNE_EVERY_S
        pruned = self._outbox.prune(self.alerts.keep_days, now=now)
        if any(pruned.values()):
            log.info("alert outbox pruned", extra={"keep_days": self.alerts.keep_days, **pruned})
        return pruned

    # --- the loop -----------------------------------------------------------------------------

    def assigned(self) -> bool:
        """The consumer group has assigned partitions to this service (or there is nothing to read)."""
        return self._consumer is None or bool(self._consumer.assignment())

    def settled(self) -> bool:
        """No delivery is pending (everything delivered or dead-lettered)."""
        if self._outbox is None:
            return True
        return self._outbox.counts()["pending"] == 0

    def run(self, stop: threading.Event | None = None, *, idle_exit_s: float | None = None) -> BatchResult:
        """Evaluate and deliver until ``stop`` is set (or, with ``idle_exit_s``, until no row arrived
        for that long and no delivery is pending)."""
        stop = stop or threading.Event()
        try:
            self.open()
            self.deliverer.start()
            last_row = time.monotonic()
            while not stop.is_set():
                batch = self.poll_once()
                if time.monotonic() >= self._next_prune:
                    self.prune()
                if batch.rows or batch.skipped or batch.bad or not self.assigned():
                    last_row = time.monotonic()  # idle only counts once the group gave us partitions
                elif idle_exit_s is not None and time.monotonic() - last_row >= idle_exit_s:
                    if self.settled():
                        break
        finally:
            self.deliverer.stop()
            self.close()
        return self.totals

    def start(self) -> threading.Event:
        """Run in a background thread (``netmon demo``); set the returned event to stop it."""
        stop = threading.Event()

        def guarded() -> None:
            try:
                self.run(stop)
            except Exception:  # noqa: BLE001 - a background service reports, it does not vanish
                log.exception("the alert service stopped")

        threading.Thread(target=guarded, name="netmon-alerts", daemon=True).start()
        return stop


class _SeekToOutbox(ConsumerRebalanceListener):
    """On assignment, start each partition at the outbox's offset (the source of truth)."""

    def __init__(self, service: AlertService) -> None:
        self.service = service

    def on_partitions_revoked(self, revoked: Any) -> None:  # offsets are committed per batch
        pass

    def on_partitions_assigned(self, assigned: Any) -> None:
        for tp in assigned:
            offset = self.service._next.get((tp.topic, tp.partition))
            if offset is not None:
                self.service._consumer.seek(tp, offset)

"""The Kafka source's options (``pipeline.source.kafka_stream``): what a capped batch warns about."""

from __future__ import annotations

import logging

import pytest

from netmon.config import Config
from pipeline.source import kafka_stream


@pytest.mark.parametrize(
    ("partitions", "cap", "warns"),
    [(2, 100, True), (1, 100, False), (2, 0, False)],
)
def test_capped_batches_over_several_partitions_warn_of_late_records(
    spark: object,
    netmon_config: Config,
    caplog: pytest.LogCaptureFixture,
    partitions: int,
    cap: int,
    warns: bool,
) -> None:
    cfg = netmon_config.replace(kafka={"partitions": partitions}, spark={"max_offsets_per_trigger": cap})
    with caplog.at_level(logging.WARNING, logger="pipeline.source"):
        raw = kafka_stream(spark, cfg)  # type: ignore[arg-type]
    assert raw.isStreaming
    warnings = [
        r for r in caplog.records if r.name == "pipeline.source" and "max_offsets_per_trigger" in r.message
    ]
    assert len(warnings) == int(warns)
    if warns:
        assert warnings[0].partitions == partitions and warnings[0].max_offsets_per_trigger == cap  # type: ignore[attr-defined]

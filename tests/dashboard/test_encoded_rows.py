"""The row cache keeps text dictionary-encoded (``bounded.encoded``): a query's rows chosen by the
dictionaries' indices (``where_equal``) are those a comparison of the text chooses, and decoding
gives back the table as read (``decoded``), on random chunks each with its own dictionary."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dashboard import bounded


def _chunks(seed: int) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    names = np.array(["top-pairs", "top-sources", "", "é-ü", "x"])
    out = []
    for _ in range(int(rng.integers(1, 12))):
        n = int(rng.integers(0, 300))
        query = [None if rng.random() < 0.05 else str(q) for q in rng.choice(names[: rng.integers(1, 6)], n)]
        out.append(pa.table({"query": pa.array(query, pa.string()), "n": rng.integers(0, 9, n)}))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_where_equal_and_decoded_are_the_plain_tables(seed: int) -> None:
    plain = pa.concat_tables(_chunks(seed))
    encoded = pa.concat_tables([bounded.encoded(t) for t in _chunks(seed)])
    assert pa.types.is_dictionary(encoded.schema.field("query").type)
    assert bounded.decoded(encoded).equals(plain)
    for value in ["top-pairs", "", "é-ü", "x", "absent"]:
        want = plain.filter(pc.fill_null(pc.equal(plain["query"], value), False))
        assert bounded.decoded(bounded.where_equal(encoded, "query", value)).equals(want), value
        assert bounded.where_equal(plain, "query", value).equals(want)
    assert sorted(q for q in pc.unique(encoded["query"]).to_pylist() if q is not None) == sorted(
        q for q in pc.unique(plain["query"]).to_pylist() if q is not None
    )

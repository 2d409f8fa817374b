"""The grouped statistics the ledger computes for every step at once equal numpy's, group by group."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from probe.analysis.intervals import distinct_pairs, grouped_medians, grouped_quantiles

QS = (0.0, 0.25, 0.5, 0.9, 0.99, 1.0)
groups = st.integers(1, 40).flatmap(
    lambda n: st.tuples(
        hnp.arrays(np.int64, n, elements=st.integers(0, 6)),
        hnp.arrays(np.int64, n, elements=st.integers(-(2**52), 2**52)),  # ns deltas: exact in float64
    )
)


@settings(max_examples=300, deadline=None)
@given(kv=groups)
def test_grouped_quantiles_equal_np_percentile_per_group(kv):
    keys, values = kv
    got_keys, got = grouped_quantiles(keys, values, QS)
    assert got_keys.tolist() == sorted(set(keys.tolist()))
    for j, key in enumerate(got_keys.tolist()):
        want = np.percentile(values[keys == key], [100 * q for q in QS])
        assert got[:, j].tolist() == want.tolist()  # the same float, not close to it


@settings(max_examples=100, deadline=None)
@given(kv=groups)
def test_grouped_medians_equal_np_median_per_group(kv):
    keys, values = kv
    got_keys, got = grouped_medians(keys, values)
    assert got.tolist() == [float(np.median(values[keys == k])) for k in got_keys.tolist()]


def test_no_groups():
    keys, q = grouped_quantiles(np.zeros(0, np.int64), np.zeros(0, np.int64), (0.5, 0.9))
    assert keys.shape == (0,) and q.shape == (2, 0)


pairs = st.integers(0, 40).flatmap(
    lambda n: st.tuples(
        hnp.arrays(np.int64, n, elements=st.integers(-(2**62), 2**62) | st.integers(0, 3)),  # pids, tids: any int64
        hnp.arrays(np.int64, n, elements=st.integers(-(2**62), 2**62) | st.integers(0, 3)),
    )
)


@settings(max_examples=300, deadline=None)
@given(ab=pairs)
def test_distinct_pairs_equal_np_unique_along_an_axis(ab):
    a, b = ab
    assert distinct_pairs(a, b).tolist() == np.unique(np.stack([a, b]), axis=1).tolist()

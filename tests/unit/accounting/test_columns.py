"""columns.duplicated against a plain Python reference (first/last occurrence of a key)."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from slurmgpu.accounting.columns import codes, duplicated, objects, per_value, text_per_value


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, n // 3, n)
    # job ids repeat with their raw id mostly, but not always (hostile input)
    job = [f"{r}_{rng.integers(0, 2)}" if rng.random() < 0.3 else str(r) for r in raw]
    job = [None if rng.random() < 0.02 else j for j in job]
    start = rng.integers(0, 5, n).astype("datetime64[s]").astype("datetime64[ns]")
    table = pa.table(
        {
            "cluster": pc_dict(rng.choice(["a", "b"], n)),
            "job_id_raw": pa.array(raw, pa.int64()),
            "job_id": pa.array(job, pa.string()),
            "start": pa.array(start, pa.timestamp("s")),
        }
    )
    return table.to_pandas(types_mapper=pd.ArrowDtype)


def pc_dict(values) -> pa.Array:
    return pa.array(values, pa.string()).dictionary_encode()


def _reference(frame: pd.DataFrame, cols: list[str], keep: str) -> np.ndarray:
    rows = list(zip(*(frame[c].astype(object).tolist() for c in cols), strict=True))
    order = range(len(rows)) if keep == "first" else reversed(range(len(rows)))
    seen, out = set(), np.zeros(len(rows), dtype=bool)
    for i in order:
        key = tuple("<NA>" if pd.isna(v) else v for v in rows[i])
        out[i] = key in seen
        seen.add(key)
    return out


@pytest.mark.parametrize("keep", ["first", "last"])
@pytest.mark.parametrize("cols", [["cluster", "job_id_raw", "job_id"], ["job_id", "start"]])
def test_duplicated_matches_reference(keep, cols):
    frame = _frame(3000, seed=len(cols))
    got = duplicated(frame, cols, keep=keep)
    want = _reference(frame, cols, keep)
    assert got.sum() > 100
    np.testing.assert_array_equal(got, want)


def test_objects_and_per_value_match_the_plain_conversion():
    frame = _frame(500, seed=7)
    frame["cluster"] = frame["cluster"].where(np.arange(500) % 7 != 0, None)  # some nulls
    want = frame["cluster"].to_numpy(dtype=object, na_value="?")
    np.testing.assert_array_equal(objects(frame, "cluster", "?"), want)
    got = per_value(frame, "cluster", lambda v: f"<{v}>", na_input="null")
    named = frame["cluster"].to_numpy(dtype=object, na_value="null")
    np.testing.assert_array_equal(got, np.array([f"<{v}>" for v in named]).astype(object))
    text = text_per_value(frame, "job_id", str.upper, na_input="none")
    plain = frame["job_id"].to_numpy(dtype=object, na_value="none")
    assert text.to_pylist() == [v.upper() for v in plain]
    assert len(objects(frame.iloc[:0], "cluster")) == 0


def test_codes_are_sorted_names_of_used_values_with_null_as_empty():
    values = ["b", None, "", "a", "b", "c", None]
    table = pa.table({"p": pa.array(values, pa.string()).dictionary_encode()})
    frame = table.to_pandas(types_mapper=pd.ArrowDtype).iloc[[0, 1, 2, 3, 4, 6]]  # "c" unused
    got, names = codes(frame.reset_index(drop=True), "p")
    assert names == ["", "a", "b"]
    assert got.tolist() == [2, 0, 0, 1, 2, 0]


def _codes_by_np_unique(frame, column):
    """The definition `codes` keeps: np.unique over the names (null and "" one name)."""
    import numpy as np

    from slurmgpu.accounting.columns import _indices

    idx, dictionary = _indices(frame, column)
    names = [("" if v is None else str(v)) for v in dictionary.to_pylist()] + [""]
    idx = np.where(idx < 0, len(names) - 1, idx)
    uniq, name_code = np.unique(np.array(names, dtype=object), return_inverse=True)
    row_code = name_code.reshape(-1)[idx]
    used = np.flatnonzero(np.bincount(row_code, minlength=len(uniq)))
    remap = np.zeros(len(uniq), dtype=np.int64)
    remap[used] = np.arange(len(used))
    return remap[row_code], [str(uniq[u]) for u in used]


def test_codes_equal_the_np_unique_definition_on_random_columns():
    """Names sorted by code point (pyarrow's byte order of UTF-8), nulls and "" merged,
    unused dictionary values dropped: as np.unique over the Python strings gives."""
    import random

    import pandas as pd
    import pyarrow as pa

    from slurmgpu.accounting.columns import codes

    rng = random.Random(7)
    pool = [None, "", "a", "b", "ä", "Z", "zz", "é", "a b", "10", "9", "Ω", "𝔘"]
    for _ in range(200):
        vals = [rng.choice([*pool, f"x{rng.randint(0, 50)}"]) for _ in range(rng.randint(1, 60))]
        arr = pa.array(vals, pa.string())
        for column in (arr, arr.dictionary_encode()):
            if pa.types.is_dictionary(column.type):  # unused dictionary values too
                extra = pa.concat_arrays([column.dictionary, pa.array(["unused", "Ω2"])])
                column = pa.DictionaryArray.from_arrays(column.indices, extra)
            frame = pd.DataFrame({"c": pd.array(column, dtype=pd.ArrowDtype(column.type))})
            mine, ref = codes(frame, "c"), _codes_by_np_unique(frame, "c")
            assert mine[0].tolist() == ref[0].tolist() and mine[1] == ref[1], vals

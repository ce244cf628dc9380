"""Fast integer views of frame columns (pandas' object factorize is the slow path at 1M rows).

The per-run frame keeps low-cardinality text dictionary-encoded (pyarrow), so group codes
come from the dictionary indices without touching a Python string per row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc


def _indices(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, pa.Array]:
    """(dictionary index per row, -1 for null; the dictionary) of a text column."""
    arr = frame[column].array
    if hasattr(arr, "__arrow_array__"):
        data = arr.__arrow_array__().combine_chunks()
    else:
        data = pa.array(np.asarray(arr, dtype=object), pa.string())
    if not pa.types.is_dictionary(data.type):
        data = pc.dictionary_encode(data)
    idx = data.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    return idx, data.dictionary


def dictionary_indices(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, list]:
    """(index per row into the names, -1 for null; the names) of a text column."""
    if len(frame) == 0:
        return np.zeros(0, dtype=np.int64), []
    idx, dictionary = _indices(frame, column)
    return idx, dictionary.to_pylist()


def codes(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, list[str]]:
    """(code per row, names): one code per distinct value; null and "" share the name "";
    codes in the names' sorted order (by code point), unused dictionary values dropped."""
    if len(frame) == 0:
        return np.zeros(0, dtype=np.int64), []
    idx, dictionary = _indices(frame, column)
    # the dictionary's names, then "" for nulls (index -1), sorted in C++ (a high-cardinality
    # column such as job_id has a name per row: no Python string per name until the end)
    names = pa.concat_arrays(
        [pc.fill_null(dictionary.cast(pa.string()), ""), pa.array([""], pa.string())]
    )
    idx = np.where(idx < 0, len(names) - 1, idx)
    order = pc.array_sort_indices(names).to_numpy()
    ordered = names.take(pa.array(order))
    # equal neighbours in sorted order share a code ("" and null)
    new = np.ones(len(ordered), dtype=bool)
    if len(ordered) > 1:
        same = pc.equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1))
        new[1:] = ~same.to_numpy(zero_copy_only=False)
    name_code = np.empty(len(names), dtype=np.int64)
    name_code[order] = np.cumsum(new) - 1
    uniq_first = np.flatnonzero(new)  # position in `ordered` of each distinct name
    row_code = name_code[idx]
    used = np.flatnonzero(np.bincount(row_code, minlength=len(uniq_first)))
    remap = np.zeros(len(uniq_first), dtype=np.int64)
    remap[used] = np.arange(len(used))
    return remap[row_code], ordered.take(pa.array(uniq_first[used])).to_pylist()


def objects(frame: pd.DataFrame, column: str, na_value: object = None) -> np.ndarray:
    """`frame[column].to_numpy(dtype=object, na_value=...)`, one Python string per distinct
    value instead of per row when the column is dictionary-encoded (same values)."""
    kind = getattr(frame[column].dtype, "pyarrow_dtype", None)
    if kind is None or not pa.types.is_dictionary(kind) or len(frame) == 0:
        return frame[column].to_numpy(dtype=object, na_value=na_value)
    idx, dictionary = _indices(frame, column)
    values = [na_value if v is None else v for v in dictionary.to_pylist()]
    table = np.empty(len(values) + 1, dtype=object)
    table[:-1] = values
    table[-1] = na_value
    return table[idx]  # index -1 (null) -> na_value


def per_value(frame: pd.DataFrame, column: str, fn, na_input: object = "") -> np.ndarray:
    """`fn(value)` for every row as an object array, called once per distinct value (a null
    is passed as `na_input`)."""
    if len(frame) == 0:
        return np.empty(0, dtype=object)
    idx, dictionary = _indices(frame, column)
    values = [na_input if v is None else v for v in dictionary.to_pylist()] + [na_input]
    table = np.empty(len(values), dtype=object)
    table[:] = [fn(v) for v in values]
    return table[idx]  # index -1 (null) -> fn(na_input)


def text_per_value(frame: pd.DataFrame, column: str, fn, na_input: str = "") -> pa.Array:
    """Like `per_value` for a text result, built as a pyarrow string array (no Python
    string per row)."""
    if len(frame) == 0:
        return pa.array([], pa.string())
    idx, dictionary = _indices(frame, column)
    values = [na_input if v is None else v for v in dictionary.to_pylist()] + [na_input]
    table = pa.array([fn(v) for v in values], pa.string())
    return table.take(pa.array(np.where(idx < 0, len(values) - 1, idx)))


def duplicated(frame: pd.DataFrame, cols: Sequence[str], keep: str = "first") -> np.ndarray:
    """`DataFrame.duplicated` over integer views of the columns (text via dictionary codes,
    numbers and times as int64), much faster than pandas' Arrow-backed factorize.

    A row can only be a duplicate if its value in each column repeats, so the key is
    compared only among the rows whose first numeric column (a job id) repeats: few rows
    (requeued runs, repeated rows) instead of all of them; encoding plain text such as job
    ids, about one value per row, is the slow part and is then done for those rows only.
    """
    numeric = [c for c in cols if _numeric(frame, c)]
    if not numeric or len(frame) == 0:
        return _duplicated(frame, cols, keep)
    values = frame[numeric[0]].to_numpy(dtype=float, na_value=np.nan)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    candidates = np.flatnonzero(counts[inverse.reshape(-1)] > 1)
    out = np.zeros(len(frame), dtype=bool)
    if len(candidates):
        out[candidates] = _duplicated(frame.iloc[candidates], cols, keep)
    return out


def _numeric(frame: pd.DataFrame, column: str) -> bool:
    kind = getattr(frame[column].dtype, "pyarrow_dtype", None)
    if kind is not None:
        return pa.types.is_integer(kind) or pa.types.is_floating(kind)
    return pd.api.types.is_numeric_dtype(frame[column].dtype)


def _duplicated(frame: pd.DataFrame, cols: Sequence[str], keep: str | bool) -> np.ndarray:
    parts = {}
    for c in cols:
        dtype = frame[c].dtype
        kind = getattr(dtype, "pyarrow_dtype", None)
        if kind is not None and (pa.types.is_string(kind) or pa.types.is_dictionary(kind)):
            parts[c] = _indices(frame, c)[0] if len(frame) else np.zeros(0, np.int64)
        elif kind is not None and pa.types.is_timestamp(kind):
            t = frame[c].to_numpy(dtype="datetime64[s]", na_value=np.datetime64("NaT"))
            parts[c] = t.astype(np.int64)
        else:
            parts[c] = frame[c].to_numpy(dtype=float, na_value=np.nan)
    return pd.DataFrame(parts).duplicated(keep=keep).to_numpy(dtype=bool)  # type: ignore[arg-type]

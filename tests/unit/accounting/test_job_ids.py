"""JobIds splits the common id forms without a regex: it must agree with the `_JOBID` /
`_JOBIDRAW` regexes (the definition) on every form, including malformed ones."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slurmgpu.accounting import fields

JOB_IDS = [
    "123", "123.batch", "123.extern", "123.0", "123.interactive", "123_4", "123_4.batch",
    "123_[5-9,11%2]", "123_[1-3]", "123+0", "123+1.0", "123.", "123..x", "123.a.b", "_4",
    "123_", "123_x", "123_4_5", "123+", "123+x", "a123", "", " 77 ", "12 3", "123_[]",
    "123_[1-3].batch", "123.ba-tch", "٣", "123_٣", "00042", "4294967296", "123+0_1",
    "123_4.", "123_4.0", ".batch", "123_4+1",
]  # fmt: skip


def _reference(values: list[str]) -> dict[str, object]:
    s = pc.utf8_trim_whitespace(pa.array(values, pa.string()))
    m = pc.extract_regex(s, fields._JOBID)
    ok = m.is_valid().to_numpy(zero_copy_only=False)
    mf = fields.fill_struct(m, {k: "" for k in ("job", "task", "range", "het", "step")})
    r = pc.extract_regex(s, fields._JOBIDRAW)
    ok_raw = r.is_valid().to_numpy(zero_copy_only=False)
    rf = fields.fill_struct(r, {"raw": "", "step": ""})
    return {
        "bad": ~ok | ~ok_raw,
        "base_job": fields._num(pc.struct_field(mf, "job")),
        "array_task": fields._num(pc.struct_field(mf, "task")),
        "het_offset": fields._num(pc.struct_field(mf, "het")),
        "range": [v or None for v in pc.struct_field(mf, "range").to_pylist()],
        "step": pc.struct_field(mf, "step").to_pylist(),
        "raw": fields._num(pc.struct_field(rf, "raw")),
    }


def test_split_ids_agree_with_the_regexes():
    values = JOB_IDS * 3  # repeated values go through the per-distinct-name step check
    ids = fields.JobIds(pa.array(values), pa.array(values))
    want = _reference(values)
    np.testing.assert_array_equal(ids.bad & ~ids.too_big, want["bad"] & ~ids.too_big)
    for name in ("base_job", "array_task", "het_offset", "raw"):
        np.testing.assert_array_equal(getattr(ids, name), want[name], err_msg=name)
    assert [v or None for v in ids.array_range] == want["range"]
    assert ids._steps.to_pylist() == want["step"]
    i = JOB_IDS.index("123_4.batch")
    assert (ids.base_job[i], ids.array_task[i], ids._steps[i].as_py()) == (123, 4, "batch")


def test_raw_only_ids_agree_with_the_regex():
    ids = fields.JobIds(None, pa.array(JOB_IDS))
    r = pc.extract_regex(pc.utf8_trim_whitespace(pa.array(JOB_IDS)), fields._JOBIDRAW)
    ok = r.is_valid().to_numpy(zero_copy_only=False)
    np.testing.assert_array_equal(ids.bad & ~ids.too_big, ~ok & ~ids.too_big)
    steps = fields.fill_struct(r, {"raw": "", "step": ""}).field("step").to_pylist()
    assert ids._steps.to_pylist() == steps

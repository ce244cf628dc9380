"""`gen-gres --check` compares slurmd's parsed records with the generated ones, record by record.

These cases run Debian's real `slurmd -G` on configs that slurmd parses differently from what
was meant: a `#` that cuts a line, a duplicated device, records Slurm splits. The old check
only looked for `error:` lines and passed all but the fatal one.
"""

from __future__ import annotations

import shutil

import pytest

from slurmgpu.model.gres_record import GresDevice, compare_gres_records, per_device
from slurmgpu.render import gres
from slurmgpu.sources import slurmd, snapshot
from tests.hostile.conftest import EXAMPLES, assert_one_error, cli


@pytest.fixture(scope="module", autouse=True)
def _slurmd_present():
    if shutil.which("slurmd") is None:
        pytest.fail("slurmd is missing: run the README's test command (sudo ./scripts/run-tests)")


def _setup(name: str, **options):
    inv = snapshot.load(EXAMPLES / f"{name}.json")
    opts = gres.GresOptions(**options)
    text = gres.render_gres_conf(inv, opts, inventory_sha256="0" * 64)
    return inv, opts, text


def _check(inv, opts, text, gres_types=None):
    return slurmd.check_gres_conf(
        text,
        gres.node_line(inv, opts),
        gres_types=gres_types or gres.gres_types(opts),
        expected=gres.expected_records(inv, opts),
    )


@pytest.mark.parametrize(
    ("name", "options"),
    [("dgx-h100", {}), ("dgx-a100-mig", {}), ("pcie-8gpu", {"shards_per_gpu": 4}),
     ("pcie-8gpu", {"node_name": "gpu[01-04]"}), ("dgx-h100", {"slurm_version": (25, 11, 0)})],
)  # fmt: skip
def test_generated_configs_parse_exactly_as_generated(name, options):
    result = _check(*_setup(name, **options))
    assert result.ok, (result.errors, result.differences)
    assert result.differences == [] and result.parsed


def test_a_hash_cutting_links_is_found():
    inv, opts, text = _setup("dgx-h100")
    line = next(x for x in text.splitlines() if "File=/dev/nvidia3 " in x)
    result = _check(inv, opts, text.replace(line, line.replace(" Links=", " #Links=")))
    assert result.errors == []  # slurmd itself is happy: only the comparison sees it
    assert not result.ok
    assert any("gpu /dev/nvidia3: Links generated" in d for d in result.differences)


def test_changed_cores_are_found():
    inv, opts, text = _setup("dgx-h100")
    tampered = text.replace("File=/dev/nvidia5 Cores=56-111", "File=/dev/nvidia5 Cores=0-55")
    result = _check(inv, opts, tampered)
    assert result.differences == ["gpu /dev/nvidia5: Cores generated 56-111, slurmd -G parsed 0-55"]


def test_a_device_named_twice_is_found():
    inv, opts, text = _setup("dgx-h100")
    result = _check(inv, opts, text.replace("File=/dev/nvidia6 ", "File=/dev/nvidia[6-7] "))
    assert not result.ok
    assert any("nvidia7" in d for d in result.differences), result.differences


def test_records_slurm_splits_are_found():
    # with shard in GresTypes, slurmd 22.05 splits each MultipleFiles= MIG record into one
    # GPU per file: the records no longer match the MIG devices generated
    inv, opts, text = _setup("dgx-a100-mig")
    result = _check(inv, opts, text, gres_types="gpu,shard")
    assert result.errors == [] and not result.ok
    assert any("did not report it" in d for d in result.differences)
    assert any("gpu: 17 generated in all" in d for d in result.differences)


def test_a_fatal_parse_is_still_an_error():
    inv, opts, text = _setup("dgx-h100")
    result = _check(
        inv, opts, text.replace("Type=h100 File=/dev/nvidia3", "Type=h1#00 File=/dev/nvidia3")
    )
    assert not result.ok and result.errors


def test_cli_check_shows_the_difference_and_installs_nothing(tmp_path, monkeypatch):
    real = gres.render_gres_conf

    def cut_links(inv, opts, **kwargs):
        text = real(inv, opts, **kwargs)
        return text.replace("File=/dev/nvidia0 Cores=0-55 Links=", "File=/dev/nvidia0 Cores=0-55 #")

    monkeypatch.setattr(gres, "render_gres_conf", cut_links)
    target = tmp_path / "gres.conf"
    target.write_text("# old\n")
    run = cli(
        "gen-gres", "--snapshot", EXAMPLES / "dgx-h100.json", "--slurm-version", "22.05",
        "--check", "-o", target,
    )  # fmt: skip
    assert_one_error(run, 1, says="parsed the generated gres.conf differently")
    assert "slurmgpu: check: differs: gpu /dev/nvidia0: Links generated" in run.stderr
    assert target.read_text() == "# old\n"


def test_cli_check_passes_and_says_what_it_compared(tmp_path):
    run = cli(
        "gen-gres", "--snapshot", EXAMPLES / "dgx-a100-mig.json", "--slurm-version", "22.05",
        "--check", "-o", tmp_path / "gres.conf",
    )  # fmt: skip
    assert run.code == 3, run.stderr  # 3: written (docs/acting.md, exit codes)
    assert "slurmd -G parsed 17 GRES records, each as generated" in run.stderr


# -- the comparison itself, without slurmd ---------------------------------------------------
def _dev(files, count=1, gtype="a100", cores=(0, 1), links=None, name="gpu"):
    return GresDevice(name, gtype, count, tuple(files), cores, links)


def test_compare_counts_and_fields():
    want = [_dev(["/dev/nvidia0", "/dev/nvidia1"], count=2), _dev(["/dev/nvidia2"])]
    got = [_dev(["/dev/nvidia0"]), _dev(["/dev/nvidia1"], gtype="a")]
    diffs = compare_gres_records(want, got)
    assert "gpu /dev/nvidia1: Type generated a100, slurmd -G parsed a" in diffs
    assert "gpu /dev/nvidia2: generated, but slurmd -G did not report it" in diffs
    assert "gpu: 3 generated in all, slurmd -G counted 2" in diffs


def test_compare_extra_record_and_identical_lists():
    same = [_dev(["/dev/nvidia0"], links="-1,4")]
    assert compare_gres_records(same, same) == []
    extra = [*same, _dev(["/dev/nvidia9"])]
    assert "gpu /dev/nvidia9: reported by slurmd -G, but not generated" in compare_gres_records(
        same, extra
    )


def test_per_device_keeps_mig_records_whole():
    mig = _dev(["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"])
    assert per_device([mig]) == [mig]
    assert len(per_device([_dev(["/dev/nvidia0", "/dev/nvidia1"], count=2)])) == 2


def test_without_root_the_check_still_compares_every_record(monkeypatch):
    # no mknod without root: each device becomes its own symlink to /dev/null (one shared
    # /dev/null made slurmd refuse "duplicate device file name" before)
    monkeypatch.setattr(slurmd.os, "geteuid", lambda: 1000)
    inv, opts, text = _setup("dgx-h100")
    result = _check(inv, opts, text)
    assert result.ok, result.differences
    assert any("could not be checked" in note for note in result.notes)
    tampered = text.replace("File=/dev/nvidia5 Cores=56-111", "File=/dev/nvidia5 Cores=0-55")
    result = _check(inv, opts, tampered)
    assert result.differences == ["gpu /dev/nvidia5: Cores generated 56-111, slurmd -G parsed 0-55"]

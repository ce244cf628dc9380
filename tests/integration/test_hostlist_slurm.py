"""The one hostlist implementation agrees with Slurm's own (`scontrol show hostlist[sorted]`)."""

from __future__ import annotations

import pytest

from slurmgpu.util.hostlist import compress_hostlist, expand_hostlist

CASES = [
    ["n9", "n10", "n11"],
    ["gpu01", "gpu02", "gpu03", "gpu07"],
    ["dgx001", "dgx002", "dgx010", "dgx099", "dgx100"],
    ["a1", "a2", "b1", "b3"],
    ["rack1-node01", "rack1-node02", "rack2-node01"],
]


@pytest.mark.parametrize("names", CASES, ids=lambda n: ",".join(n))
def test_compress_matches_scontrol(slurm_cluster, names):
    ours = compress_hostlist(names)
    theirs = slurm_cluster.scontrol("show", "hostlistsorted", ",".join(names)).strip()
    assert sorted(expand_hostlist(ours)) == sorted(names)
    assert sorted(expand_hostlist(theirs)) == sorted(names)
    assert ours == theirs


@pytest.mark.parametrize("text", ["gpu[01-03,07]", "n[8-10]", "r[1-2]n[1-2]", "x,y[1-2]"])
def test_expand_matches_scontrol(slurm_cluster, text):
    theirs = slurm_cluster.scontrol("show", "hostnames", text).split()
    assert expand_hostlist(text) == theirs

"""User names -> uids from the passwd database (NSS: files, LDAP, sssd all answer `getpwnam`)."""

from __future__ import annotations

import pwd
from collections.abc import Iterable


def uids_for(names: Iterable[str]) -> tuple[dict[str, int], list[str]]:
    """({name: uid} for the users that exist here, [names not found])."""
    found: dict[str, int] = {}
    missing: list[str] = []
    for name in sorted(set(names)):
        try:
            found[name] = pwd.getpwnam(name).pw_uid
        except KeyError:
            missing.append(name)
    return found, missing

"""Fixtures of the signing tests: one pair of real OpenSSH keys and one two-release signed index per session."""

from __future__ import annotations

import pytest

from signing.signed_sites import History, Keys, make_keys, two_releases


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="session")
def history(keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> History:
    return two_releases(tmp_path_factory.mktemp("signed"), keys)

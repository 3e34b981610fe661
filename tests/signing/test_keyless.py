"""The keyless path as far as a machine without sigstore's services goes (a STAND-IN for a real keyless
release): the identity policy kiln verify applies is run on a real public sigstore bundle, verified offline
against sigstore's production trust root that sigstore-python ships.

data/rfc8785-0.1.2-github-release.sigstore.json: the public bundle of a real release
(trailofbits/rfc8785.py's wheel 0.1.2, signed by its .github/workflows/release.yml at refs/tags/v0.1.2 in
GitHub Actions, Rekor log index 79605083); stored with the artifact's sha256 (the wheel itself is not
needed: the bundle signs its digest). The production bundle is a public record of the transparency log."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln_tool.guard.signed import GitHubIdentity, VerifyError, check_identity, github_policy, verify_sigstore

pytest.importorskip("sigstore", reason="the keyless checks need sigstore-python (requirements/signing.txt)")

BUNDLE = Path(__file__).parent / "data" / "rfc8785-0.1.2-github-release.sigstore.json"
ARTIFACT_SHA256 = "c4e92e9ecc828bef2aa7dba1de8ac983511f7532a0df11c770d39099a25cf201"


@pytest.fixture(scope="module")
def offline() -> object:
    from sigstore.verify import Verifier

    return Verifier.production(offline=True)


def _verify(offline: object, identity: GitHubIdentity) -> None:
    from sigstore.hashes import Hashed
    from sigstore.models import Bundle
    from sigstore_models.common.v1 import HashAlgorithm

    bundle = Bundle.from_json(BUNDLE.read_bytes())
    hashed = Hashed(algorithm=HashAlgorithm.SHA2_256, digest=bytes.fromhex(ARTIFACT_SHA256))
    offline.verify_artifact(hashed, bundle, github_policy(identity))  # type: ignore[attr-defined]


@pytest.mark.parametrize("workflow", [None, ".github/workflows/release.yml"])
def test_the_repository_and_workflow_that_signed_are_accepted(offline: object, workflow: str | None) -> None:
    _verify(offline, GitHubIdentity("trailofbits/rfc8785.py", workflow))


@pytest.mark.parametrize(("identity", "reason"), [
    (GitHubIdentity("opkiln/opkiln"), "OIDCSourceRepositoryURI does not match"),
    (GitHubIdentity("trailofbits/rfc8785"), "OIDCSourceRepositoryURI does not match"),
    (GitHubIdentity("trailofbits/rfc8785.py", ".github/workflows/other.yml"),
     "signed by workflow 'https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/v0.1.2'"),
])
def test_another_repository_or_workflow_is_refused(offline: object, identity: GitHubIdentity, reason: str) -> None:
    from sigstore.errors import VerificationError

    with pytest.raises(VerificationError, match=reason.replace(".", r"\.")):
        _verify(offline, identity)


def test_a_bundle_over_other_bytes_is_refused_naming_the_file(offline: object) -> None:
    with pytest.raises(VerifyError, match=r"^releases/release-000001\.json\.sigstore\.json: not a good signature by "
                                          r"trailofbits/rfc8785\.py"):
        verify_sigstore(b"a release manifest it never signed\n", BUNDLE.read_bytes(),
                        GitHubIdentity("trailofbits/rfc8785.py"), "releases/release-000001.json", offline)
    with pytest.raises(VerifyError, match="not a sigstore bundle"):
        verify_sigstore(b"x", b'{"mediaType": "nonsense"}', GitHubIdentity("a/b"), "r", offline)


@pytest.mark.parametrize(("identity", "reason"), [
    (GitHubIdentity("no-slash"), "not OWNER/NAME"),
    (GitHubIdentity("a/b", "release.yml"), "not .github/workflows/NAME.yml"),
    (GitHubIdentity("a/b", ".github/workflows/../x.yml"), "not .github/workflows/NAME.yml"),
])
def test_a_malformed_identity_is_refused(identity: GitHubIdentity, reason: str) -> None:
    with pytest.raises(VerifyError, match=reason):
        check_identity(identity)

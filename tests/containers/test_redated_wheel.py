"""The release rehearsal's refused "rebuild" (kiln release-rehearsal): the CPU wheel with its zip entries dated a day
later. It must be what a reproducible rebuild on another day is: the same name, members, bytes, modes and RECORD,
other archive bytes. (The rehearsal itself checks that the release path refuses it.)"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from datetime import datetime, timezone
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln_tool.commands.release_rehearsal import redate_wheel

NAME = "pkg-0.1.0+pt213cpu-cp311-cp311-manylinux_2_34_x86_64.whl"


def _wheel(path: Path, files: dict[str, bytes]) -> Path:
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_STORED if name.endswith(".so") else zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        meta = "pkg-0.1.0+pt213cpu.dist-info"
        zf.writestr(f"{meta}/METADATA", "Metadata-Version: 2.1\nName: pkg\nVersion: 0.1.0+pt213cpu\n")
        zf.writestr(f"{meta}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                    "Tag: cp311-cp311-manylinux_2_34_x86_64\n")
        record += [f"{meta}/METADATA,,", f"{meta}/WHEEL,,", f"{meta}/RECORD,,"]
        zf.writestr(f"{meta}/RECORD", "\n".join(record) + "\n")
    return path


@settings(max_examples=25, deadline=None)
@given(files=st.dictionaries(st.sampled_from(["pkg/__init__.py", "pkg/_C.so", "pkg/data.json", "pkg/sub/x.py"]),
                             st.binary(max_size=4096), min_size=1),
       days=st.integers(min_value=1, max_value=20000))
def test_the_redated_wheel_differs_only_in_its_dates(tmp_path_factory, files: dict[str, bytes], days: int) -> None:
    tmp = tmp_path_factory.mktemp("redate")
    src = _wheel(tmp / NAME, files)
    epoch = 86400 * days + 3723
    when = datetime.fromtimestamp(epoch, tz=timezone.utc)
    # zip cannot date before 1980: an earlier epoch is dated 1980-01-01, as reproducible-builds tools do
    expected = (1980, 1, 1, 0, 0, 0) if when.year < 1980 else (when.year, when.month, when.day, 1, 2, 2)
    out = redate_wheel(src, tmp / "rebuilt" / NAME, epoch)
    assert out.name == src.name and out.read_bytes() != src.read_bytes()
    assert not list((tmp / "rebuilt").glob("*.part"))
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(out) as b:
        assert [i.filename for i in a.infolist()] == [i.filename for i in b.infolist()]
        for x, y in zip(a.infolist(), b.infolist(), strict=True):
            assert a.read(x) == b.read(y)
            assert (x.external_attr, x.compress_type) == (y.external_attr, y.compress_type)
            assert y.date_time == expected
    # its RECORD still holds: every member's hash and size, as installers check them
    with zipfile.ZipFile(out) as b:
        record = b.read("pkg-0.1.0+pt213cpu.dist-info/RECORD").decode().splitlines()
        for line in record:
            name, digest, size = line.rsplit(",", 2)
            if digest:
                data = b.read(name)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert (digest, int(size)) == (f"sha256={want}", len(data))


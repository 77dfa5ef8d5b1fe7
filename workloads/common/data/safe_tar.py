"""Reading members of a tar archive in one streaming pass, refusing any member that is unsafe.

Nothing is extracted to disk: the wanted members come back as bytes, and only once the bytes of
the whole archive, hashed as they were read, match the published digest (the caller may unpickle them).
"""
import pathlib
import tarfile
import zlib

from .checksum import VerifyingReader
from .errors import DataError, describe
from .published import RemoteFile

# The most bytes of one member: a wanted member is read whole into memory. A CIFAR-10 batch (10,000
# images and their pickle) is about 31 MB.
LONGEST_MEMBER = 64 << 20


def read_tar_members(remote: RemoteFile, archive: pathlib.Path, wanted: set) -> dict:
    """One streaming pass over the archive: validate every member, keep the bytes of the wanted ones,
    and verify the archive's full digest on the bytes read; a DataError if anything is wrong."""
    contents = {}
    try:
        with VerifyingReader(remote, archive) as reader:
            try:
                with tarfile.open(str(archive), mode="r|*", fileobj=reader) as tar:
                    for member in tar:
                        _check_member_is_safe(remote, archive, member)
                        if member.isfile() and _normalised_member_name(member.name) in wanted:
                            contents[_normalised_member_name(member.name)] = tar.extractfile(member).read()
            except (tarfile.TarError, EOFError, zlib.error) as error:
                reader.verify()  # a tampered archive is named as such, before its format is blamed
                raise DataError(f"{remote.name}: {archive} is not a readable tar archive ({describe(error)}); "
                                f"delete it and run again to download it afresh") from None
            reader.verify()
    except OSError as error:
        raise DataError(f"{remote.name}: cannot read {archive} ({describe(error)}); "
                        f"delete it and run again to download it afresh") from None
    missing = sorted(wanted - set(contents))
    if missing:
        raise DataError(f"{remote.name}: {archive} lacks {', '.join(missing)}; "
                        f"delete it and run again to download it afresh")
    return contents


def _normalised_member_name(name: str) -> str:
    return name[2:] if name.startswith("./") else name


def _check_member_is_safe(remote: RemoteFile, archive: pathlib.Path, member: tarfile.TarInfo) -> None:
    """Refuse anything that could escape a folder, is not a plain file or folder, or is larger than
    LONGEST_MEMBER (before any of its bytes are read)."""
    name = member.name
    parts = name.replace("\\", "/").split("/")
    problem = None
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        problem = "absolute path"
    elif ".." in parts:
        problem = "'..' in its path"
    elif member.issym() or member.islnk():
        problem = "link"
    elif member.ischr() or member.isblk() or member.isfifo():
        problem = "device or pipe"
    elif not (member.isfile() or member.isdir()):
        problem = "not a regular file or folder"
    elif member.size > LONGEST_MEMBER:
        raise DataError(f"{remote.name}: archive member {name!r} is larger than {LONGEST_MEMBER} bytes "
                        f"({member.size}) in {archive}; refusing to read it: delete the file and download "
                        f"the original archive")
    if problem:
        raise DataError(f"{remote.name}: unsafe archive member {name!r} ({problem}) in {archive}; "
                        f"refusing to read it: delete the file and download the original archive")

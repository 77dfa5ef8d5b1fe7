"""The published archives the real datasets come from, with the checksums their publishers give."""
from dataclasses import dataclass  # novermin (Python 3.6 images install the dataclasses backport)

# The most bytes an archive may have unless its declaration says less: no published archive here
# comes near it, and a server that sends more is not sending the archive.
LONGEST_ARCHIVE = 1 << 30


@dataclass(frozen=True)
class RemoteFile:
    """A published archive: where it lives and the checksum its publisher gives.

    ``sha256``: beside a published MD5 (which can be forged), the archive's SHA-256, computed from
    a copy that matched the published checksum; every check of the archive checks it too. Empty
    where it is not known, or where the published digest is a SHA-256 already.

    ``max_bytes``: the most bytes the archive can have (its size, where it is known): a download or
    a file in the data dir larger than that is refused before it fills the disk or the memory."""

    name: str
    filename: str
    url: str
    algorithm: str  # "md5" or "sha256"
    digest: str
    sha256: str = ""
    max_bytes: int = LONGEST_ARCHIVE

    def __post_init__(self):
        if self.sha256 and self.algorithm == "sha256" and self.sha256.lower() != self.digest.lower():
            raise ValueError(f"{self.name}: two different SHA-256 digests declared for {self.filename}")

    def expected_digests(self) -> dict:
        """Every digest the archive must have, by algorithm: the published one first."""
        digests = {self.algorithm: self.digest.lower()}
        if self.sha256:
            digests.setdefault("sha256", self.sha256.lower())
        return digests


# The sha256 of the published tarball (170,498,071 bytes) whose MD5 is the one Toronto publishes.
CIFAR10 = RemoteFile("CIFAR-10", "cifar-10-python.tar.gz",
                     "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                     "md5", "c58f30108f718f92721af3b95e74349a",
                     sha256="6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce", max_bytes=170_498_071)
# The sha256 that keras.datasets.imdb.load_data passes to get_file: no other digest is needed.
IMDB = RemoteFile("IMDB", "imdb.npz", "https://storage.googleapis.com/tensorflow/tf-keras-datasets/imdb.npz",
                  "sha256", "69664113be75683a8fe16e3ed0ab59fda8886cb3cd7ada244f7d9544e4676b9f",
                  max_bytes=32 << 20)  # imdb.npz is about 17.5 MB; read whole into memory (read_verified)

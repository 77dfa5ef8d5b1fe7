"""The published archives the real datasets come from, with the checksums their publishers give."""
from dataclasses import dataclass  # novermin (Python 3.6 images install the dataclasses backport)


@dataclass(frozen=True)
class RemoteFile:
    """A published archive: where it lives and the checksum its publisher gives."""

    name: str
    filename: str
    url: str
    algorithm: str  # "md5" or "sha256"
    digest: str


CIFAR10 = RemoteFile("CIFAR-10", "cifar-10-python.tar.gz",
                     "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                     "md5", "c58f30108f718f92721af3b95e74349a")
# The sha256 that keras.datasets.imdb.load_data passes to get_file.
IMDB = RemoteFile("IMDB", "imdb.npz", "https://storage.googleapis.com/tensorflow/tf-keras-datasets/imdb.npz",
                  "sha256", "69664113be75683a8fe16e3ed0ab59fda8886cb3cd7ada244f7d9544e4676b9f")

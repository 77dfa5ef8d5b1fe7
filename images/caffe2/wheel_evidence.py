"""Which torch wheels on PyPI still hold Caffe2's Python API (caffe2/python/...)?

Reads only each wheel's zip central directory with HTTP range requests (a few hundred KB per
wheel), never the whole wheel. Host side only (requests + the standard library):

    python images/caffe2/wheel_evidence.py 1.7.1 1.8.0 ... > images/caffe2/wheel-evidence.txt

For every version it looks at the Linux x86_64 wheels (manylinux), prints one line per wheel:
version, wheel name, Python tag, entries under caffe2/python/, whether core.py and workspace.py
and the compiled caffe2_pybind11_state extension are present.
"""
import io
import sys
import zipfile

import urllib.parse

import requests

PYPI = "https://pypi.org/pypi/{package}/json"  # every release's files (the per-version page is not always served)


class RangeFile(io.RawIOBase):
    """A read-only, seekable file over HTTP range requests (what zipfile needs for its directory)."""

    def __init__(self, session: requests.Session, url: str):
        self.session, self.url, self.position = session, url, 0
        head = session.head(url, allow_redirects=True, timeout=60)
        head.raise_for_status()
        self.size = int(head.headers["Content-Length"])
        self.fetched = 0

    def seekable(self):
        return True

    def readable(self):
        return True

    def tell(self):
        return self.position

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = base + offset
        return self.position

    def read(self, count=-1):
        if count is None or count < 0:
            count = self.size - self.position
        count = min(count, self.size - self.position)
        if count <= 0:
            return b""
        response = self.session.get(self.url, timeout=120,
                                    headers={"Range": f"bytes={self.position}-{self.position + count - 1}"})
        if response.status_code != 206:
            raise RuntimeError(f"{self.url}: the server ignored the range request ({response.status_code})")
        data = response.content
        self.position += len(data)
        self.fetched += len(data)
        return data

    def readinto(self, buffer):
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def linux_wheels(releases, version, base_url):
    """A mirror may serve file URLs relative to the JSON page: resolve them against it."""
    return [dict(f, url=urllib.parse.urljoin(base_url, f["url"])) for f in releases[version]
            if f["packagetype"] == "bdist_wheel" and "x86_64" in f["filename"] and "linux" in f["filename"]]


def describe(session, wheel):
    handle = RangeFile(session, wheel["url"])
    names = zipfile.ZipFile(handle).namelist()
    python_api = [n for n in names if n.startswith("caffe2/python/")]
    extension = [n for n in python_api if n.rsplit("/", 1)[-1].startswith("caffe2_pybind11_state")]
    return {
        "python_api_files": len(python_api),
        "core.py": "caffe2/python/core.py" in names,
        "workspace.py": "caffe2/python/workspace.py" in names,
        "pybind11_state": ", ".join(n.rsplit("/", 1)[-1] for n in extension) or "-",
        "caffe2_files": sum(n.startswith("caffe2/") for n in names),
        "read_bytes": handle.fetched,
    }


def main(versions):
    session = requests.Session()
    index = session.get(PYPI.format(package="torch"), timeout=60)
    index.raise_for_status()
    releases = index.json()["releases"]
    print("version | wheel | python | requires_python | caffe2/python files | core.py | workspace.py | "
          "compiled extension | caffe2/ files | bytes read")
    for version in versions:
        for wheel in linux_wheels(releases, version, index.url):
            found = describe(session, wheel)
            print(f"{version} | {wheel['filename']} | {wheel['python_version']} | {wheel.get('requires_python')} | "
                  f"{found['python_api_files']} | {found['core.py']} | {found['workspace.py']} | "
                  f"{found['pybind11_state']} | {found['caffe2_files']} | {found['read_bytes']}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["1.7.1"])

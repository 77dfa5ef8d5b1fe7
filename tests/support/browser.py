"""Open a local page in a real headless Chromium: its console errors and its rendered DOM.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: commands
in on file descriptor 3, replies and events out on 4, each a JSON message ended by a NUL byte),
so that nothing listens on a port and the standard library is enough. Unlike ``--dump-dom``,
the protocol says what each console message is: console.error and console.assert calls,
uncaught exceptions and the browser's own errors (a resource that failed to load, a blocked
script) are errors; console.log and warnings are not.

    page = open_page(Path("report.html"), fragment="pytorch,jax")
    page.console_errors  # [] for a page that ran cleanly
    page.dom             # document.documentElement.outerHTML once the page has loaded
    open_page(path, script="document.querySelector('input').click()").dom  # after what a user did

``require_chromium()`` skips the calling test where no Chromium is installed, unless
ROSETTA_REQUIRE_DOCKER=1 (CI), where a missing browser fails it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
LOAD_TIMEOUT_S = 60.0
SETTLE_S = 0.2  # after the load event: scripts that run on it (and the hashchange it may fire) finish
INSTALL_HINT = "apt-get install -y chromium fonts-dejavu-core"


class BrowserError(RuntimeError):
    """Chromium did not start, or did not answer in time."""


@dataclasses.dataclass
class Page:
    console_errors: list[str]
    dom: str


def chromium() -> str | None:
    """The Chromium executable on PATH, or None."""
    return next((found for found in map(shutil.which, BROWSERS) if found), None)


def require_chromium() -> str:
    """The Chromium executable; skips the test without one (fails it under ROSETTA_REQUIRE_DOCKER=1)."""
    found = chromium()
    if found:
        return found
    message = f"no Chromium on PATH ({INSTALL_HINT})"
    if os.environ.get("ROSETTA_REQUIRE_DOCKER") == "1":
        pytest.fail(message + "; ROSETTA_REQUIRE_DOCKER=1 needs the browser test to run")
    pytest.skip(message)


def open_page(path: str | os.PathLike, *, fragment: str = "", script: str = "",
              timeout: float = LOAD_TIMEOUT_S) -> Page:
    """Load ``path`` (a local file, as file://, with ``#fragment`` when given) in headless Chromium;
    return the errors its console saw and its DOM after the load event (and after ``script``, run
    in the page as a user's clicks would be, when given)."""
    executable = chromium()
    if executable is None:
        raise BrowserError(f"no Chromium on PATH ({INSTALL_HINT})")
    url = Path(path).resolve().as_uri() + (f"#{fragment}" if fragment else "")
    with tempfile.TemporaryDirectory(prefix="rosetta-chromium-") as profile:
        with _DevTools(executable, profile, timeout) as browser:
            target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Runtime", "Log", "Page"):
                browser.call(f"{domain}.enable", session=session)
            browser.events.clear()  # what about:blank said is not the page's
            navigation = browser.call("Page.navigate", {"url": url}, session=session)
            if navigation.get("errorText"):
                raise BrowserError(f"{url}: {navigation['errorText']}")
            browser.wait_for("Page.loadEventFired", session)
            time.sleep(SETTLE_S)
            if script:
                browser.call("Runtime.evaluate", {"expression": script}, session=session)
                time.sleep(SETTLE_S)
            dom = browser.call("Runtime.evaluate", {"expression": "document.documentElement.outerHTML",
                                                    "returnByValue": True}, session=session)["result"]["value"]
            browser.drain()
            errors = [error for event in browser.events if event.get("sessionId") == session
                      for error in [_error(event)] if error]
    return Page(console_errors=errors, dom=dom)


def _error(event: dict) -> str | None:
    """The error an event reports, as one line; None for anything else."""
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        return "console." + params["type"] + ": " + " ".join(
            str(argument.get("value", argument.get("description", ""))) for argument in params.get("args", []))
    if method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        return "uncaught: " + str(details.get("exception", {}).get("description") or details.get("text"))
    if method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
        entry = params["entry"]
        return f"{entry.get('source', 'browser')}: {entry.get('text')} {entry.get('url', '')}".strip()
    return None


class _DevTools:
    """A headless Chromium and its DevTools pipe: ``call`` a method, collect ``events``."""

    def __init__(self, executable: str, profile: str, timeout: float):
        self.executable, self.profile, self.timeout = executable, profile, timeout
        self.events: list[dict] = []
        self._next_id, self._buffer = 0, b""

    def __enter__(self) -> "_DevTools":
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()
        arguments = [self.executable, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                     "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                     f"--user-data-dir={self.profile}", "about:blank"]
        # Chromium reads the protocol from descriptor 3 and writes to 4: a small Python step moves the
        # pipes there (they may have any number here) and becomes Chromium
        # (copied aside first, so that neither overwrites the other when one of them already is 3 or 4)
        wrapper = (f"import os, sys; copies = os.dup({commands_read}), os.dup({replies_write}); "
                   "[os.dup2(copy, target) for copy, target in zip(copies, (3, 4)) if copy != target]; "
                   "[os.set_inheritable(target, True) for target in (3, 4)]; os.execv(sys.argv[1], sys.argv[1:])")
        # its log goes to a file: a pipe nobody reads could fill up and stall it
        self._log = open(Path(self.profile) / "chromium.log", "w+b")
        self._process = subprocess.Popen([sys.executable, "-c", wrapper, *arguments],
                                         pass_fds=(commands_read, replies_write), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=self._log)
        os.close(commands_read)
        os.close(replies_write)
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._process.poll() is None:
                self._send("Browser.close", {}, None)
                self._process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait()
        finally:
            for descriptor in (self._commands, self._replies):
                try:
                    os.close(descriptor)
                except OSError:
                    pass
            self._log.close()

    def call(self, method: str, params: dict | None = None, *, session: str | None = None) -> dict:
        """Send one command and wait for its reply; BrowserError for an error reply."""
        message_id = self._send(method, params or {}, session)
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._receive(deadline, f"a reply to {method}")
            if message.get("id") == message_id:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error'].get('message')}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method: str, session: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(event.get("method") == method and event.get("sessionId") == session for event in self.events):
            self.events.append(self._receive(deadline, method))

    def drain(self) -> None:
        """Collect the events already sent (console messages logged just before the DOM was read)."""
        while select.select([self._replies], [], [], 0.05)[0] or b"\0" in self._buffer:
            try:
                self.events.append(self._receive(time.monotonic() + 1.0, "an event"))
            except BrowserError:
                return

    def _send(self, method: str, params: dict, session: str | None) -> int:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _receive(self, deadline: float, waiting_for: str) -> dict:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._replies], [], [], remaining)[0]:
                raise BrowserError(f"Chromium sent no {waiting_for} within {self.timeout:g} s")
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                self._log.seek(0)
                log = self._log.read().decode(errors="replace")[-2000:]
                raise BrowserError(f"Chromium closed its DevTools pipe while waiting for {waiting_for}: {log}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

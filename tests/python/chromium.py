"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages
separated by NUL bytes on file descriptors 3 and 4), for the report's browser test. No network, no port,
no package beyond the standard library; Debian's chromium (env/apt-packages.txt).

    with Browser() as b:
        page = b.open("file:///.../index.html", width=1400, height=900)   # waits for the load event
        page.evaluate("document.title")
        page.screenshot("first_screen.png")
        page.errors                                                       # console errors, exceptions
"""
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium():
    """The path of a Chromium binary on PATH, None when there is none."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class ProtocolError(Exception):
    pass


class Browser:
    """One headless Chromium process; its DevTools connection is the pipe pair (fd 3: commands in, fd 4:
    replies and events out)."""

    def __init__(self, binary=None, timeout=60):
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise FileNotFoundError("no chromium on PATH")
        self.timeout = timeout
        self._id = 0
        self._buffer = b""
        self._events = []
        self._profile = tempfile.mkdtemp(prefix="sinklab-chromium-")
        # The child's fd 3 reads our commands, its fd 4 writes its replies. Our ends are moved above 9 first,
        # so that the dup2 calls in the child cannot overwrite one another.
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()
        cmd_r, out_w = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (cmd_r, out_w))

        def child_fds():
            os.dup2(cmd_r, 3)
            os.dup2(out_w, 4)

        args = [self.binary, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-sync",
                "--disable-background-networking", "--disable-component-update", "--mute-audio",
                "--hide-scrollbars=false", f"--user-data-dir={self._profile}", "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, preexec_fn=child_fds, close_fds=False)
        for fd in (cmd_r, out_w):
            os.close(fd)
        self._w, self._r = cmd_w, out_r

    # -- the protocol ------------------------------------------------------------------------------------
    def _read_message(self, deadline):
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from chromium")
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    err = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else ""
                    raise ProtocolError(f"chromium closed the pipe: {err[-2000:]}")
                self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)

    def send(self, method, params=None, session=None, timeout=None):
        """Sends a command and returns its result; events that arrive meanwhile are kept (events())."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise ProtocolError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def wait_for(self, method, session=None, timeout=None):
        """The first event `method` (of `session`) not yet seen, waiting for it."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for k, ev in enumerate(self._events):
                if ev.get("method") == method and (session is None or ev.get("sessionId") == session):
                    return self._events.pop(k)
            self._events.append(self._read_message(deadline))

    def events(self, session=None):
        return [e for e in self._events if session is None or e.get("sessionId") == session]

    # -- pages ---------------------------------------------------------------------------------------------
    def open(self, url, width=1400, height=900):
        """A new tab of `width` x `height` CSS pixels with `url` loaded (its load event fired)."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session=session)
        return page

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send("Browser.close", timeout=10)
            except (ProtocolError, TimeoutError, OSError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for fd in (self._w, self._r):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.proc.stderr:
            self.proc.stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Page:
    def __init__(self, browser, session):
        self.browser, self.session = browser, session

    def evaluate(self, expression):
        """The value of a JavaScript expression (JSON-serialisable), awaiting a promise."""
        r = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                   "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in r:
            raise ProtocolError(f"{expression[:80]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot(self, path):
        """The viewport (the first screen) as a PNG file."""
        data = self.browser.send("Page.captureScreenshot", {"format": "png"}, session=self.session)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    @property
    def errors(self):
        """Console errors, uncaught exceptions and browser log errors (failed loads) of the page so far."""
        out = []
        for e in self.browser.events(self.session):
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:500])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.error: " + json.dumps(p.get("args", []))[:500])
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: " + p["entry"].get("text", "") + " " + p["entry"].get("url", ""))
        return out

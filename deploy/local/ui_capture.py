#!/usr/bin/env python3
"""Screenshots of the Temporal Web UI with headless Chromium, over the DevTools protocol.

`chromium --screenshot` waits for the page to go idle under virtual time, and a running
workflow's page never does (the UI long-polls its history), so this drives Chromium itself:
it opens a page, waits in real time until a given text is rendered, optionally clicks through
the UI (menus, dialogs) and types into it, and captures the viewport as PNG. Standard library
only (the WebSocket framing is the few lines the protocol needs).

Usage:
  ui_capture.py [--width W] [--height H] [--timeout S] STEP...
Steps run in the order given, in one browser tab:
  --open URL         navigate to URL
  --wait-text TEXT   wait (up to --timeout seconds) until TEXT is rendered
  --click TEXT       click the visible button/link/menu item/tab labelled TEXT
  --focus SELECTOR   click the element matching the CSS selector (focuses an input or editor)
  --type TEXT        type TEXT into the focused element
  --blur             take the focus away (an editor may reformat its text on blur, moving
                     what is below it: blur before clicking there)
  --scroll-to TEXT   scroll the first element containing TEXT to the middle of the viewport
  --settle SECONDS   sleep
  --shot FILE.png    capture the viewport
Exits non-zero, naming the failed step, when one fails.
"""

import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
]


class WebSocket:
    """A client WebSocket (RFC 6455) with just what DevTools needs: text frames, no extensions."""

    def __init__(self, url: str, timeout: float):
        rest = url.split("://", 1)[1]
        hostport, path = rest.split("/", 1)
        host, port = hostport.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            response += chunk
        status = response.split(b"\r\n", 1)[0]
        if b" 101 " not in status:
            raise ConnectionError(f"DevTools refused the WebSocket upgrade: {status.decode()}")
        self.buffer = response.split(b"\r\n\r\n", 1)[1]

    def send(self, text: str) -> None:
        payload = text.encode()
        header = bytearray([0x81])  # FIN + text frame
        length = len(payload)
        if length < 126:
            header.append(0x80 | length)
        elif length < 1 << 16:
            header.append(0x80 | 126)
            header += length.to_bytes(2, "big")
        else:
            header.append(0x80 | 127)
            header += length.to_bytes(8, "big")
        mask = os.urandom(4)
        header += mask
        self.sock.sendall(bytes(header) + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def receive(self) -> str:
        """The next complete text message (continuation frames joined)."""
        message = b""
        while True:
            first, second = self._read(2)
            length = second & 0x7F
            if length == 126:
                length = int.from_bytes(self._read(2), "big")
            elif length == 127:
                length = int.from_bytes(self._read(8), "big")
            payload = self._read(length)
            opcode = first & 0x0F
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode in (0x9, 0xA):  # ping/pong: nothing to answer for a short session
                continue
            message += payload
            if first & 0x80:
                return message.decode()


class DevTools:
    """Sends DevTools commands to one page and waits for their results."""

    def __init__(self, ws: WebSocket):
        self.ws = ws
        self.next_id = 0

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.receive())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")


# Finds the innermost visible clickable element whose text (trimmed) is the wanted text, or,
# failing that, whose text or aria-label contains it. It scrolls the element's innermost
# descendant carrying that text into view (a table row can be wider than the viewport, and
# scrolling the row itself would shift the page sideways) and returns that descendant's centre.
FIND_CLICKABLE = """
(wanted) => {
  const visible = (el) => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const candidates = [...document.querySelectorAll(
    'button, a, [role=menuitem], [role=option], [role=tab], [role=button], li, label, tr')].filter(visible);
  const text = (el) => (el.innerText || '').trim();
  let hit = candidates.filter((el) => text(el) === wanted);
  if (!hit.length) hit = candidates.filter((el) =>
    text(el).includes(wanted) || (el.getAttribute('aria-label') || '').includes(wanted));
  if (!hit.length) return null;
  let el = hit[hit.length - 1];
  for (;;) {
    const inner = [...el.children].find((c) => visible(c) && text(c).includes(wanted));
    if (!inner) break;
    el = inner;
  }
  el.scrollIntoView({block: 'center', inline: 'nearest'});
  const r = el.getBoundingClientRect();
  return {x: r.left + r.width / 2, y: r.top + r.height / 2};
}
"""

# Scrolls the innermost element containing the wanted text (the first one in the page) to the
# middle of the viewport.
SCROLL_TO = """
(wanted) => {
  const has = (el) => (el.textContent || '').includes(wanted);
  const all = [...document.querySelectorAll('body *')].filter(
    (el) => has(el) && ![...el.children].some(has) && el.getClientRects().length > 0);
  if (!all.length) return false;
  all[0].scrollIntoView({block: 'center', inline: 'nearest'});
  return true;
}
"""

# The first visible element matching a CSS selector (closed dialogs keep their hidden copies).
FIND_SELECTOR = """
(selector) => {
  for (const el of document.querySelectorAll(selector)) {
    const r = el.getBoundingClientRect();
    if (!(r.width > 0 && r.height > 0)) continue;
    el.scrollIntoView({block: 'center'});
    const s = el.getBoundingClientRect();
    return {x: s.left + s.width / 2, y: s.top + s.height / 2};
  }
  return null;
}
"""


def page_has_text(devtools: DevTools, text: str) -> bool:
    return bool(devtools.evaluate(
        f"(document.body && document.body.innerText || '').includes({json.dumps(text)})"))


def click_where(devtools: DevTools, finder: str, target: str, timeout: float) -> None:
    """Clicks the centre of what `finder` (a JS function of `target`) locates, once it shows."""
    deadline = time.monotonic() + timeout
    locate = f"({finder})({json.dumps(target)})"
    while not devtools.evaluate(locate):
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing clickable matching {target!r} appeared within {timeout:.0f} s")
        time.sleep(0.5)
    time.sleep(0.3)  # let the scroll settle, then locate again where the pointer lands
    point = devtools.evaluate(locate)
    if not point:
        raise RuntimeError(f"{target!r} disappeared before it could be clicked")
    for kind in ("mousePressed", "mouseReleased"):
        devtools.call("Input.dispatchMouseEvent", type=kind, x=point["x"], y=point["y"],
                      button="left", clickCount=1)
    time.sleep(0.8)


def start_chromium(width: int, height: int, profile: str) -> subprocess.Popen:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        sys.exit("ui_capture: chromium is not installed (apt-get install chromium)")
    return subprocess.Popen(
        [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
         "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def page_websocket(profile: str, timeout: float) -> str:
    """The DevTools WebSocket URL of the browser's first page, once the browser listens."""
    port_file = os.path.join(profile, "DevToolsActivePort")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(port_file, encoding="ascii") as f:
                port = int(f.readline().strip())
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
        except (OSError, ValueError):
            pass
        time.sleep(0.25)
    raise RuntimeError(f"chromium did not open its DevTools port within {timeout:.0f} s")


def run_step(devtools: DevTools, kind: str, value, timeout: float) -> None:
    if kind == "open":
        devtools.call("Page.navigate", url=value)
    elif kind == "wait_text":
        deadline = time.monotonic() + timeout
        while not page_has_text(devtools, value):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{value!r} was not rendered within {timeout:.0f} s")
            time.sleep(0.5)
    elif kind == "click":
        click_where(devtools, FIND_CLICKABLE, value, timeout)
    elif kind == "focus":
        click_where(devtools, FIND_SELECTOR, value, timeout)
    elif kind == "type":
        devtools.call("Input.insertText", text=value)
        time.sleep(0.5)
    elif kind == "blur":
        devtools.evaluate("document.activeElement && document.activeElement.blur()")
        time.sleep(0.8)
    elif kind == "scroll_to":
        if not devtools.evaluate(f"({SCROLL_TO})({json.dumps(value)})"):
            raise RuntimeError(f"no element with text {value!r} to scroll to")
        time.sleep(0.5)
    elif kind == "settle":
        time.sleep(value)
    elif kind == "shot":
        shot = devtools.call("Page.captureScreenshot", format="png")
        with open(value, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        print(f"ui_capture: wrote {value}", file=sys.stderr)


class Step(argparse.Action):
    """Keeps the steps in the order given."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.steps.append((self.dest, values))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--height", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=60, help="seconds per step")
    parser.set_defaults(steps=[])
    for step in ("open", "wait_text", "click", "focus", "type", "scroll_to", "shot"):
        parser.add_argument("--" + step.replace("_", "-"), dest=step, action=Step)
    parser.add_argument("--settle", dest="settle", type=float, action=Step)
    parser.add_argument("--blur", dest="blur", nargs=0, action=Step)
    args = parser.parse_args()
    if not args.steps:
        parser.error("no steps given")

    profile = tempfile.mkdtemp(prefix="buzz-ui-capture-")
    browser = start_chromium(args.width, args.height, profile)
    step = "start chromium"
    try:
        devtools = DevTools(WebSocket(page_websocket(profile, args.timeout), args.timeout))
        devtools.call("Page.enable")
        devtools.call("Emulation.setDeviceMetricsOverride", width=args.width, height=args.height,
                      deviceScaleFactor=1, mobile=False)
        for kind, value in args.steps:
            step = f"--{kind.replace('_', '-')} {value}"
            run_step(devtools, kind, value, args.timeout)
        return 0
    except (RuntimeError, OSError) as err:
        print(f"ui_capture: step {step}: {err}", file=sys.stderr)
        return 1
    finally:
        browser.terminate()
        try:
            browser.wait(timeout=10)
        except subprocess.TimeoutExpired:
            browser.kill()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

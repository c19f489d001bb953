"""The dashboard in a real browser: Datasette as a subprocess, headless Chromium loading
``/-/llm-accounts``. Proves the page renders its SVG chart and paints its bars.

The ledger is placed around ``NOW`` (credit period 2026-11) and Datasette runs under Debian's
``faketime`` with its clock started at ``NOW``, so the period and day it shows are the ledger's
whatever the real date.
"""

import contextlib
import os
import pathlib
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
import zlib

import pytest

from conftest import needs_faketime, under_faketime, without_faketime
from test_datasette import NOW, build_ledger

DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
CHROMIUM = next(
    (path for path in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if path),
    None,
)
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)"),
    needs_faketime,
]

SETTLED_BLUE = (0x00, 0x72, 0xB2)  # the settled-spend bars' fill (Okabe-Ito blue)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def dashboard_url(ledger_path):
    build_ledger(ledger_path, now=NOW, wall=NOW)
    port = free_port()
    argv, env = under_faketime(
        [sys.executable, "-m", "datasette", "serve", str(ledger_path), "--host", "127.0.0.1", "--port", str(port)],
        NOW,
        os.environ,
    )
    # faketime runs Datasette as its child: a process group of their own stops both.
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}/-/llm-accounts"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.stderr.read().decode(errors="replace")[-2000:]
            try:
                with DIRECT.open(url, timeout=2) as response:
                    assert response.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "Datasette did not answer"
                time.sleep(0.2)
        yield url
    finally:
        stop(process)


def stop(process):
    """End Datasette, then the faketime running it. faketime removes its clock's shared-memory
    objects once its child exits; killed itself, it would leave them behind for a later faketime
    with the same process id to trip over."""
    try:
        children = pathlib.Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    except OSError:
        children = []
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(child), signal.SIGTERM)
    try:
        process.wait(timeout=10 if children else 0)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):  # the whole group, faketime included
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def chromium(tmp_path, *args):
    profile = tmp_path / "chromium-profile"
    command = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--hide-scrollbars", "--no-proxy-server", f"--user-data-dir={profile}", *args,
    ]
    # Never under libfaketime, which hangs Chromium: the page it renders reads no clock.
    result = subprocess.run(command, capture_output=True, timeout=120, env=without_faketime(os.environ))
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    return result.stdout.decode(errors="replace")


def png_pixels(data):
    """(width, height, rows of (r, g, b)) from an 8-bit RGB or RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, "unexpected PNG format"
    channels = 3 if colour == 2 else 4
    stride = width * channels
    raw, rows, previous = zlib.decompress(idat), [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append([tuple(line[i : i + 3]) for i in range(0, stride, channels)])
        previous = line
    return width, height, rows


def test_dashboard_dom_has_the_svg_charts_with_bars(dashboard_url, tmp_path):
    dom = chromium(tmp_path, "--dump-dom", dashboard_url)
    assert dom.count('class="bar settled"') == 5  # one per account with a budget
    assert 'class="bar open"' in dom
    assert dom.count('class="bar account"') >= 3  # settled spend on several days
    assert "Budget reached" in dom and "Blocked: auth_failed" in dom


def test_dashboard_screenshot_paints_the_bars(dashboard_url, tmp_path):
    screenshot = tmp_path / "dashboard.png"
    chromium(tmp_path, f"--screenshot={screenshot}", "--window-size=1280,900", dashboard_url)
    assert screenshot.exists() and screenshot.stat().st_size > 20_000
    width, height, rows = png_pixels(screenshot.read_bytes())
    assert (width, height) == (1280, 900)
    blue = sum(row.count(SETTLED_BLUE) for row in rows)
    assert blue > 2_000, "the settled-spend bars were not painted"


def test_dashboard_dom_has_the_model_and_client_dollar_panels_and_the_pace_forecast(dashboard_url, tmp_path):
    dom = chromium(tmp_path, "--dump-dom", dashboard_url)
    assert 'class="llma-model-spend"' in dom and 'data-model="claude-sonnet-4-5"' in dom
    assert 'class="llma-client-spend"' in dom and 'data-client="nightly"' in dom
    assert 'aria-label="Pace forecast"' in dom and "Pace: " in dom

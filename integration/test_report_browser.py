"""``unaligned report`` in a real browser: headless Chromium loads the page from a file (no
network), its DOM has one duration bar per measured barrier, and the screenshot shows the bars
in their colours. ``./dev test`` installs Chromium (Debian package ``chromium``); this test
installs it too when it can, and skips only when it cannot."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from checkpoint_files import decide, metrics, new_checkpoint, plan, source_offset, spark_commit
from checkpoint_files import store_metrics as write_barrier_metrics
from unaligned import cli

ALIGNED_RGB = (0x4C, 0x78, 0xA8)
UNALIGNED_RGB = (0xF5, 0x85, 0x18)
BATCHES = 6


def chromium_binary() -> str:
    """The Chromium executable, installed with apt-get when missing (skip if that fails)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and shutil.which("apt-get") is not None and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, check=False)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "chromium"],
            env=env,
            capture_output=True,
            check=False,
        )
        found = shutil.which("chromium")
    if found is None:
        pytest.skip("chromium is not installed and could not be installed with apt-get")
    return found


@pytest.fixture(scope="module")
def chromium() -> str:
    return chromium_binary()


def run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            binary,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--window-size=1200,900",
            # the page draws its charts with a script: let it finish before the DOM or the
            # screenshot is taken (under load a screenshot caught one colour of bars drawn)
            "--virtual-time-budget=10000",
            "--run-all-compositor-stages-before-draw",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A report of six barriers; odd batches cut (unaligned) and run past the timeout."""
    root = new_checkpoint(tmp_path_factory.mktemp("browser") / "ck")
    for batch in range(BATCHES):
        plan(root, batch, [source_offset({0: 10 * (batch + 1)})])
        spark_commit(root, batch)
        decide(root, batch)
        unaligned = batch % 2 == 1
        write_barrier_metrics(
            root,
            metrics(
                batch,
                mode="unaligned" if unaligned else "aligned",
                duration_ms=40_000 if unaligned else 8_000 + 1000 * batch,
                rows_spilled=500 if unaligned else 0,
                rows_replayed=0 if unaligned else 200,
                channel_state_files=1 if unaligned else 0,
                channel_state_bytes=65_536 if unaligned else 0,
            ),
        )
    page = root.parent / "report.html"
    assert cli.main(["report", str(root), "-o", str(page), "--timeout", "30s"]) == 0
    yield page


class DomBars(HTMLParser):
    """``rect.bar`` elements of each chart, in the DOM Chromium serialised."""

    def __init__(self) -> None:
        super().__init__()
        self.chart: str | None = None
        self.bars: dict[str, list[dict[str, str]]] = {}
        self.thresholds: list[dict[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "svg":
            self.chart = values.get("id", "")
            self.bars[self.chart] = []
        elif tag == "rect" and "bar" in values.get("class", "").split() and self.chart:
            self.bars[self.chart].append(values)
        elif tag == "line" and values.get("class") == "threshold":
            self.thresholds.append(values)

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.chart = None


def test_chromium_builds_one_duration_bar_per_barrier(chromium: str, report: Path) -> None:
    dom = run_chromium(chromium, report.parent / "profile-dom", "--dump-dom", report.as_uri())
    parsed = DomBars()
    parsed.feed(dom.stdout)
    assert set(parsed.bars) == {
        "chart-duration",
        "chart-start-delay",
        "chart-rows",
        "chart-state-bytes",
    }
    duration = parsed.bars["chart-duration"]
    assert [b["data-batch"] for b in duration] == [str(b) for b in range(BATCHES)]
    assert [b["class"].split()[1] for b in duration] == ["aligned", "unaligned"] * (BATCHES // 2)
    assert len(parsed.bars["chart-rows"]) == 2 * BATCHES
    assert [t["data-value"] for t in parsed.thresholds] == ["30000"]


def rgb_pixels(png: bytes) -> list[tuple[int, int, int]]:
    """Decode an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes) to pixels."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    pixels: list[tuple[int, int, int]] = []
    for row in range(height):
        start = row * (stride + 1)
        kind_byte, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            if kind_byte == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind_byte == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind_byte == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind_byte == 4:
                corner = previous[i - channels] if i >= channels else 0
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + pred) & 0xFF
        pixels += [tuple(line[i : i + 3]) for i in range(0, stride, channels)]  # type: ignore[misc]
        previous = line
    return pixels


def near(pixel: tuple[int, int, int], rgb: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 12 for a, b in zip(pixel, rgb, strict=True))


def test_the_screenshot_shows_the_bars_in_their_colours(chromium: str, report: Path) -> None:
    shot = report.parent / "report.png"
    run_chromium(chromium, report.parent / "profile-shot", f"--screenshot={shot}", report.as_uri())
    pixels = rgb_pixels(shot.read_bytes())
    assert len(pixels) == 1200 * 900
    non_white = sum(1 for p in pixels if p != (255, 255, 255))
    aligned = sum(1 for p in pixels if near(p, ALIGNED_RGB))
    unaligned = sum(1 for p in pixels if near(p, UNALIGNED_RGB))
    assert non_white > 20_000, "the page looks blank"
    # three bars of each mode in the duration chart, each tens of pixels wide and tall
    assert aligned > 3_000 and unaligned > 3_000, (aligned, unaligned)

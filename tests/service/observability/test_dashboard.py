"""The live dashboard in a real headless Chromium: after real traffic, the page shows the numbers of
/dashboard/data, formatted by its documented rule, and it loads nothing from anywhere else.

The screenshot of the rendered page is kept as tests/artifacts/dashboard.png (gitignored).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from decimal import ROUND_HALF_UP, Decimal
from html.parser import HTMLParser
from pathlib import Path

import pytest

from service.observability.dashboard import PAGE
from tests.service.conftest import EXAMPLES, start_server

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs headless Chromium at /usr/bin/chromium")

IRIS_OK = {"inputs": [{"name": "features", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}]}
IRIS_PAIR = {
    "inputs": [{"name": "features", "shape": [2, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2, 6.7, 3.0, 5.2, 2.3]}]
}
IRIS_BAD = {"inputs": [{"name": "features", "shape": [1, 3], "datatype": "FP32", "data": [5.1, 3.5, 1.4]}]}  # 400


def to_fixed(x: float, digits: int) -> str:
    """JavaScript's Number.prototype.toFixed: the exact binary value, rounded half up (it picks the
    larger n on a tie, where Python's format would round half to even)."""
    return str(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def _ms(x: float) -> str:
    return to_fixed(x, 2)


# The page's formatting rule, stat by stat (see the comment at the top of service/observability/static/dashboard.html).
FORMATS = {
    "p50_ms": _ms,
    "p95_ms": _ms,
    "p99_ms": _ms,
    "queue_p50_ms": _ms,
    "queue_p95_ms": _ms,
    "rps": lambda x: to_fixed(x, 1),
    "error_rate": lambda x: to_fixed(x * 100, 1) + "%",
    "batch_size_mean": lambda x: to_fixed(x, 1),
    "requests": str,
    "errors": str,
    "batches": str,
    "batch_size_max": str,
}
NULL = "\u2013"


def formatted(stat: str, value) -> str:
    return NULL if value is None else FORMATS[stat](value)


class StatSpans(HTMLParser):
    """The text of every `<span data-model=… data-stat=…>` in a document, by (model, stat)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[tuple[str, str], str] = {}
        self._open: tuple[str, str] | None = None
        self.empty_shown = False
        self.status = ""  # the class of the status line: "live" once the page has rendered data

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "span" and "data-stat" in a:
            self._open = (a["data-model"], a["data-stat"])
            self.values[self._open] = ""
        if a.get("id") == "empty" and "hidden" not in a:
            self.empty_shown = True
        if a.get("id") == "status":
            self.status = a.get("class") or ""

    def handle_endtag(self, tag):
        if tag == "span":
            self._open = None

    def handle_data(self, data):
        if self._open is not None:
            self.values[self._open] += data


def chromium(tmp_path: Path, *args: str) -> str:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    command = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-proxy-server", f"--user-data-dir={profile}",
        # Time enough for the page's first fetch and render; its 2 s refresh may run once more.
        "--virtual-time-budget=3000",
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def rendered(tmp_path: Path, url: str) -> StatSpans:
    dom = chromium(tmp_path, "--dump-dom", url)
    spans = StatSpans()
    spans.feed(dom)
    assert spans.status == "live", f"the page did not render its data: {dom[:3000]}"
    return spans


@pytest.fixture
def server():
    server = start_server(EXAMPLES, poll_interval_s=0)
    yield server
    server.stop()


def send_traffic(http) -> None:
    for i in range(200):
        r = http.post("/v2/models/iris_classifier/infer", json=IRIS_PAIR if i % 4 == 0 else IRIS_OK)
        assert r.status_code == 200, r.text
    for _ in range(6):
        assert http.post("/v2/models/iris_classifier/infer", json=IRIS_BAD).status_code == 400
    for i in range(40):
        r = http.post("/v1/models/half_plus_two:predict", json={"instances": [1.0, 2.0, float(i)]})
        assert r.status_code == 200, r.text
    for _ in range(2):
        assert http.post("/v1/models/half_plus_two:predict", json={"instances": [[1.0, 2.0]]}).status_code == 400


def test_page_is_self_contained(server, client):
    r = client(server).get("/dashboard")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    html = r.text
    assert html == PAGE
    # Nothing to fetch from elsewhere: no remote or protocol-relative src/href, no CSS imports or
    # remote url(...). (The SVG namespace name in the script is an identifier, never fetched.)
    assert not re.search(r"""\b(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert not re.search(r"""url\(\s*["']?\s*(https?:)?//""", html, re.I)
    assert "@import" not in html
    assert not re.search(r"<(link|iframe|img|object|embed)\b", html, re.I)
    assert not re.search(r"<script[^>]*\bsrc\s*=", html, re.I)


def test_data_is_the_live_snapshot(server, client):
    http = client(server)
    assert http.get("/dashboard/data").json()["models"] == {}
    send_traffic(http)
    data = http.get("/dashboard/data").json()
    assert (data["window_s"], data["bucket_s"]) == (300.0, 5.0)
    iris, hp2 = data["models"]["iris_classifier"], data["models"]["half_plus_two"]
    assert (iris["requests"], iris["errors"], iris["error_rate"]) == (206, 6, 6 / 206)
    assert (hp2["requests"], hp2["errors"], hp2["error_rate"]) == (42, 2, 2 / 42)
    assert iris["protocols"] == {"v2": 206} and hp2["protocols"] == {"v1": 42}
    assert iris["rps"] == iris["requests"] / iris["span_s"]
    assert 0 < iris["p50_ms"] <= iris["p95_ms"] <= iris["p99_ms"]
    assert (iris["batch_size_max"], hp2["batch_size_mean"]) == (2, 3.0)
    assert len(iris["series"]) == 60 and sum(p["requests"] for p in iris["series"]) == 206
    # By signature: the same requests, apart (each of these models has one, and a request failing before a
    # signature was resolved would count under "").
    assert sum(sig["requests"] for sig in iris["signatures"].values()) == 206
    assert iris["signatures"]["serving_default"]["requests"] >= 200
    assert hp2["signatures"]["serving_default"]["p50_ms"] > 0


@needs_chromium
def test_dashboard_shows_each_signature(server, client, tmp_path):
    send_traffic(client(server))
    dom = chromium(tmp_path, "--dump-dom", f"{server.url}/dashboard")
    table = re.search(r'<table class="signatures" data-model="iris_classifier">(.*?)</table>', dom, re.S)
    assert table is not None, dom[:3000]
    assert re.search(r'<tr data-signature="serving_default"><td>serving_default</td><td>[0-9.]+</td>', table.group(1))


@needs_chromium
def test_empty_dashboard_says_no_traffic_yet(server, tmp_path):
    spans = rendered(tmp_path, f"{server.url}/dashboard")
    assert spans.empty_shown
    assert spans.values == {}


@needs_chromium
def test_dashboard_shows_the_live_numbers(server, client, tmp_path):
    http = client(server)
    send_traffic(http)
    before = http.get("/dashboard/data").json()
    spans = rendered(tmp_path, f"{server.url}/dashboard")
    after = http.get("/dashboard/data").json()

    assert not spans.empty_shown
    assert {model for model, _ in spans.values} == set(before["models"]) == {"iris_classifier", "half_plus_two"}
    for model, stats in before["models"].items():
        shown = {stat: text for (m, stat), text in spans.values.items() if m == model}
        assert set(shown) == set(FORMATS), model
        for stat in FORMATS:
            if stat == "rps":
                continue
            # traffic has stopped: counts, rates and percentiles no longer move
            assert shown[stat] == formatted(stat, stats[stat]), (model, stat)
            assert after["models"][model][stat] == stats[stat], (model, stat)
        # rps = requests / span, and the span grew while Chromium loaded the page: the page's value
        # lies between the snapshots taken before and after it.
        slowest, fastest = after["models"][model]["rps"], stats["rps"]
        assert float(to_fixed(slowest, 1)) <= float(shown["rps"]) <= float(to_fixed(fastest, 1)), model
    assert spans.values[("iris_classifier", "error_rate")] == "2.9%"  # 6 / 206
    assert spans.values[("iris_classifier", "requests")] == "206"

    screenshot = tmp_path / "dashboard.png"
    chromium(tmp_path, f"--screenshot={screenshot}", "--window-size=1280,1000", f"{server.url}/dashboard")
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 10_000
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(screenshot, ARTIFACTS / "dashboard.png")

"""CORS as browsers enforce it: a real Chromium (headless) loads a page from another origin that calls predict
and v2 infer with `fetch`; the allowed origin reads the answers (and our exposed headers), another origin is
blocked by the browser. Preflights are answered on the fast inference routes and FastAPI's alike."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess

import pytest

from tests.service.conftest import EXAMPLES
from tests.service.local_http import LocalHTTPServer, QuietHandler

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")

PAGE = """<!doctype html><script>
const api = %(api)s;
async function call(path, init) {
  try {
    const r = await fetch(api + path, init);
    return {status: r.status, body: await r.text(), jsonLength: r.headers.get("Inference-Header-Content-Length")};
  } catch (e) {
    return {error: String(e)};
  }
}
(async () => {
  const predict = await call("/v1/models/half_plus_two:predict", {method: "POST",
      headers: {"Content-Type": "application/json", "Authorization": "Bearer t0ken"},
      body: JSON.stringify({instances: [1.0, 2.0]})});
  const infer = await call("/v2/models/half_plus_two/infer", {method: "POST",
      headers: {"Content-Type": "application/json", "Authorization": "Bearer t0ken",
                "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
      body: JSON.stringify({inputs: [{name: "x", datatype: "FP32", shape: [1], data: [4.0]}],
                            outputs: [{name: "y", parameters: {binary_data: true}}]})});
  const metadata = await call("/v1/models/half_plus_two/metadata", {});
  await fetch("/report", {method: "POST", body: JSON.stringify({predict, infer, metadata})});
})();
</script>"""


class PageServer:
    """The page's origin: serves the page (calling `api`, set once the API server is up) and takes the page's
    report of what its calls got."""

    def __init__(self) -> None:
        self.api = ""
        self.reports: queue.Queue = queue.Queue()
        owner = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                page = (PAGE % {"api": json.dumps(owner.api)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def do_POST(self) -> None:  # noqa: N802
                owner.reports.put(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

        self.http = LocalHTTPServer(Handler)
        # "localhost" against the API's 127.0.0.1: another host and port, so another origin to the browser.
        self.origin = f"http://localhost:{self.http.port}"

    def visit(self, tmp_path) -> dict:
        """Open the page in headless Chromium and return its report."""
        browser = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                    f"--user-data-dir={tmp_path / 'chromium'}", self.origin + "/"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            return self.reports.get(timeout=60)
        finally:
            browser.kill()
            browser.wait(10)

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def page():
    p = PageServer()
    yield p
    p.close()


def _repository(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "half_plus_two", repo / "half_plus_two")
    return repo


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium")
def test_a_browser_on_an_allowed_origin_reads_the_answers(tmp_path, make_server, page):
    server = make_server(_repository(tmp_path), cors_allow_origins=[page.origin], api_token="t0ken")
    page.api = server.url
    report = page.visit(tmp_path)
    assert report["predict"] == {"status": 200, "body": '{"predictions":[2.5,3.0]}', "jsonLength": None}, report
    infer = report["infer"]
    # The binary output's JSON header length is one of the headers the page may read (exposed).
    assert infer["status"] == 200 and int(infer["jsonLength"]) > 0, report
    assert report["metadata"]["status"] == 401, report  # no token: the API answers, the browser lets the page read it


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium")
def test_a_browser_on_another_origin_is_blocked(tmp_path, make_server, page):
    server = make_server(_repository(tmp_path), cors_allow_origins=["https://app.example.com"])
    page.api = server.url
    report = page.visit(tmp_path)
    for call in ("predict", "infer", "metadata"):
        assert "error" in report[call] and "Failed to fetch" in report[call]["error"], report


def test_preflights_are_answered_on_every_route(tmp_path, make_server, client):
    origin = "https://app.example.com"
    server = make_server(_repository(tmp_path), cors_allow_origins=[origin], cors_allow_methods=["GET", "POST"],
                         cors_max_age_s=120)
    http = client(server)
    for path in ("/v1/models/half_plus_two:predict", "/v2/models/half_plus_two/infer", "/v2/repository/index",
                 "/v1/models/half_plus_two/metadata"):
        r = http.options(path, headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                        "Access-Control-Request-Headers": "content-type,traceparent"})
        assert r.status_code == 200, (path, r.text)
        assert r.headers["access-control-allow-origin"] == origin and r.headers["access-control-max-age"] == "120"
        methods = r.headers["access-control-allow-methods"]
        assert "POST" in methods and "DELETE" not in methods
        assert "traceparent" in r.headers["access-control-allow-headers"]
    refused = http.options("/v1/models/half_plus_two:predict",
                           headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
    answer = http.post("/v1/models/half_plus_two:predict", json={"instances": [1.0]}, headers={"Origin": origin})
    assert answer.headers["access-control-allow-origin"] == origin
    assert "Inference-Header-Content-Length" in answer.headers["access-control-expose-headers"]


def test_cors_is_off_unless_configured(tmp_path, make_server, client):
    server = make_server(_repository(tmp_path))
    r = client(server).post("/v1/models/half_plus_two:predict", json={"instances": [1.0]},
                            headers={"Origin": "https://app.example.com"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers

"""The live dashboard in headless Chromium (Debian chromium + chromium-driver, via selenium):
the page loads, polls its data, draws its charts and heatmaps, and a screenshot is taken."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from inferplex_tools.benchtool.launch import RunningServer

ROOT = Path(__file__).resolve().parents[2]

#: non-transparent pixels on a canvas
PAINTED = """
const canvas = document.getElementById(arguments[0]);
const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
let painted = 0;
for (let i = 3; i < data.length; i += 4) if (data[i]) painted += 1;
return painted;
"""

#: the models table as {model: [cell texts]}
TABLE = """
const rows = {};
for (const tr of document.querySelectorAll("#models tbody tr")) {
  rows[tr.dataset.model] = Array.from(tr.cells, (td) => td.textContent);
}
return rows;
"""


def browser_paths() -> tuple[str, str]:
    """chromium and chromedriver; installs them (scripts/system_packages.sh) when missing and
    skips, saying why, only when that fails."""
    found = shutil.which("chromium"), shutil.which("chromedriver")
    if not all(found):
        result = subprocess.run(
            ["bash", str(ROOT / "scripts" / "system_packages.sh")],
            capture_output=True,
            text=True,
            check=False,
        )
        found = shutil.which("chromium"), shutil.which("chromedriver")
        if not all(found):
            pytest.skip(
                "chromium / chromedriver are not installed and scripts/system_packages.sh "
                f"could not install them: {(result.stdout + result.stderr).strip()}"
            )
    return found[0] or "", found[1] or ""


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    chromium, chromedriver = browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,1600",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    yield driver
    driver.quit()


@pytest.fixture
def traffic(server: RunningServer) -> Iterator[None]:
    """add_sub requests in the background while the page is open."""
    stop = threading.Event()

    def send() -> None:
        client = httpclient.InferenceServerClient(server.http_url)
        a = np.ones((1, 16), dtype=np.float32)
        inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        try:
            while not stop.wait(0.02):
                client.infer("add_sub", inputs)
        finally:
            # closed in the thread that made it: tritonclient's gevent pool must not be
            # collected later in another thread
            client.close()

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(10)


def test_the_dashboard_renders_live_data(
    server: RunningServer, browser: webdriver.Chrome, traffic: None, tmp_path: Path
) -> None:
    browser.get(f"http://{server.metrics_url}/dashboard")
    assert browser.title == "inferplex dashboard"
    status = browser.find_element(By.ID, "status")
    # a few polls, and add_sub's throughput drawn from more than one sample

    def live(_: object) -> dict[str, list[str]] | None:
        """The table once the page has polled a few times and shows add_sub's traffic
        (read in one go: the page rebuilds it every second)."""
        if int(status.get_attribute("data-updates") or 0) < 3:
            return None
        rows: dict[str, list[str]] = browser.execute_script(TABLE)
        try:
            return rows if float(rows["add_sub"][5]) > 0 else None
        except (KeyError, ValueError):  # not listed yet, or no figure yet
            return None

    rows = WebDriverWait(browser, 30, poll_frequency=0.2).until(live)
    assert rows["add_sub"][1:3] == ["1", "READY"]
    assert rows["broken"][2] == "UNAVAILABLE"
    assert browser.find_element(By.ID, "server-state").text == "ready"
    assert "add_sub/1" in browser.find_element(By.ID, "legend").text
    for chart in ("chart-throughput", "chart-latency", "chart-queue"):
        assert browser.execute_script(PAINTED, chart) > 500, f"{chart} is empty"
    compute = browser.find_element(By.ID, "heatmap-compute")
    assert int(compute.get_attribute("data-rows") or 0) == len(rows) - 1  # broken has none
    assert int(compute.get_attribute("data-cells") or 0) > 0
    assert browser.execute_script(PAINTED, "heatmap-compute") > 500
    assert browser.execute_script(PAINTED, "heatmap-memory") > 0
    screenshot = tmp_path / "dashboard.png"
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert screenshot.stat().st_size > 10_000
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors

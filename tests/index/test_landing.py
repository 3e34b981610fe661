"""The landing page, loaded from the real server in headless Chromium (Debian's chromium and
chromium-driver, driven by Selenium): pick torch, CUDA and Python, read the command; without
JavaScript the coverage table still tells everything. Screenshots go to tests/_artifacts/index/."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from index.helpers import Server, kiln_index
from index.synthetic_wheels import make_wheel

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
_MISSING = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]

# Checked before any fixture builds a site: without a browser the tests skip, saying what to install.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(_MISSING), reason=f"{' and '.join(_MISSING)} missing: apt-get install chromium "
                       "chromium-driver (scripts/ci/system-deps.sh)"),
]


@pytest.fixture(scope="module")
def landing_url(server: Server, published_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A site with several combinations: the real CPU wheel (audited, through the CLI), then synthetic
    wheels for torch 2.14 + CUDA 13.0 and a stable-ABI CUDA 13.0 wheel merged in (library call without
    the audit: they have no extension to audit)."""
    from kiln_tool.index import build_index

    root = tmp_path_factory.mktemp("landing")
    out = server.root / "landing"
    dist = root / "dist"
    dist.mkdir()
    shutil.copy2(published_wheel, dist / published_wheel.name)
    url = f"{server.url}landing/"
    result = kiln_index(dist, out, "--base-url", url)
    assert result.returncode == 0, result.stderr
    extra = root / "extra"
    make_wheel(extra, version="0.1.0+pt214cu130", cuda_tag="cu130", torch_major_minor="2.14",
               torch_requirement="torch<2.15,>=2.14", platform="manylinux_2_28_x86_64")
    make_wheel(extra, version="0.1.0+cu130", abi_mode="stable", python_tag="cp310", cuda_tag="cu130",
               torch_major_minor="2.13", torch_requirement="torch>=2.13", platform="manylinux_2_28_x86_64")
    build_index(extra, out, audit=None)
    return url


def _driver(javascript: bool = True) -> Any:
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tempfile.mkdtemp(prefix="kiln-index-chromium-")
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1200,1000"):
        options.add_argument(arg)
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.profile_dir = profile
    return driver


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = _driver()
    yield driver
    driver.quit()
    shutil.rmtree(driver.profile_dir, ignore_errors=True)


def _choose(browser: Any, torch: str, cuda: str, python: str) -> tuple[str, str]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    for element, value in (("torch", torch), ("cuda", cuda), ("python", python)):
        Select(browser.find_element(By.ID, element)).select_by_value(value)
    return browser.find_element(By.ID, "command").text, browser.find_element(By.ID, "command-uv").text


def test_choosing_a_combination_shows_its_install_command(browser: Any, landing_url: str, artifacts: Path) -> None:
    from selenium.webdriver.common.by import By

    browser.get(landing_url)
    assert browser.find_element(By.ID, "chooser").is_displayed()

    pip, uv = _choose(browser, "2.13", "cpu", "3.11")
    assert pip == f"python3.11 -m pip install opkiln -f {landing_url}cpu/torch2.13/index.html"
    assert uv == f"uv pip install --python 3.11 opkiln -f {landing_url}cpu/torch2.13/index.html"
    assert browser.find_element(By.ID, "copy").is_displayed()
    browser.save_screenshot(str(artifacts / "landing.png"))

    # The stable-ABI (abi3) wheel serves every Python from 3.10 on, for torch 2.14 too.
    pip, _uv = _choose(browser, "2.14", "cu130", "3.12")
    assert pip == f"python3.12 -m pip install opkiln -f {landing_url}cu130/torch2.14/index.html"
    matrix = json.loads((REPO / "src" / "kiln_tool" / "data" / "matrix.json").read_text())
    torch_index = matrix["torch_index"].format(variant="cu130")
    assert f'python3.12 -m pip install "torch==2.14.*" --index-url {torch_index}' in browser.find_element(
        By.ID, "note").text
    selected = browser.find_elements(By.CSS_SELECTOR, "#coverage tbody tr.selected")
    assert [row.get_attribute("data-torch") + "/" + row.get_attribute("data-cuda") for row in selected] == [
        "2.14/cu130"]
    browser.save_screenshot(str(artifacts / "landing-cu130.png"))


def test_choices_without_a_wheel_say_so(browser: Any, landing_url: str, artifacts: Path) -> None:
    from selenium.webdriver.common.by import By

    browser.get(landing_url)
    pip, _uv = _choose(browser, "2.13", "cpu", "3.12")
    assert pip == "No wheel for Python 3.12 with PyTorch 2.13 (CPU)."
    assert "3.11" in browser.find_element(By.ID, "note").text
    assert not browser.find_element(By.ID, "copy").is_displayed()
    assert not browser.find_element(By.ID, "command-uv").is_displayed()

    pip, _uv = _choose(browser, "2.14", "cpu", "3.11")
    assert pip == "No wheel for PyTorch 2.14 with CPU."
    assert "CUDA 13.0" in browser.find_element(By.ID, "note").text
    browser.save_screenshot(str(artifacts / "landing-missing.png"))


def test_the_command_shown_points_at_a_page_listing_the_wheel(browser: Any, landing_url: str,
                                                               published_wheel: Path) -> None:
    from selenium.webdriver.common.by import By

    browser.get(landing_url)
    pip, _uv = _choose(browser, "2.13", "cpu", "3.11")
    page = pip.split(" -f ", 1)[1]
    browser.get(page)
    names = [a.text for a in browser.find_elements(By.TAG_NAME, "a")]
    assert published_wheel.name in names


def test_without_javascript_the_table_has_every_command(landing_url: str, artifacts: Path) -> None:
    from selenium.webdriver.common.by import By

    driver = _driver(javascript=False)
    try:
        driver.get(landing_url)
        assert not driver.find_element(By.ID, "chooser").is_displayed()
        rows = driver.find_elements(By.CSS_SELECTOR, "#coverage tbody tr")
        combos = {(r.get_attribute("data-torch"), r.get_attribute("data-cuda")) for r in rows}
        assert {("2.13", "cpu"), ("2.14", "cu130"), ("2.13", "cu130")} <= combos
        commands = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#coverage code.cmd")]
        assert f"pip install opkiln -f {landing_url}cpu/torch2.13/index.html" in commands
        assert "needs JavaScript" in driver.page_source
        driver.save_screenshot(str(artifacts / "landing-nojs.png"))
    finally:
        driver.quit()
        shutil.rmtree(driver.profile_dir, ignore_errors=True)

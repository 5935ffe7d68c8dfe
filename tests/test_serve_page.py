"""The page at `/` in headless Chromium: pick a task, fill its fields, see bars and the outcome.

Needs Debian's `chromium` (`apt-get install -y chromium`) and the `playwright` Python package
(never `playwright install`: the browser comes from Debian). Skips with the reason otherwise.
Set `JEV_SCREENSHOT=path.png` to keep the screenshot it takes.
"""

import os
import re
import shutil
import threading
from pathlib import Path

import httpx
import pytest
import uvicorn

from jev.serve.app import create_app
from jev.serve.settings import ServeSettings
from tests.serving import free_port, tiny_decider, wait_ready

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
if not Path(CHROMIUM).exists():
    pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def base_url():
    app = create_app(tiny_decider(), ServeSettings(max_wait_ms=1))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=5) as http:
        wait_ready(http.get)
    yield base
    server.should_exit = True
    thread.join(10)


@pytest.mark.slow
def test_a_person_decides_one_ticket(base_url, tmp_path):
    screenshot = Path(os.environ.get("JEV_SCREENSHOT", tmp_path / "page.png"))
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, args=FLAGS, headless=True,
            viewport={"width": 900, "height": 1300},
        )
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(base_url + "/")
            page.wait_for_selector("#field-text")
            assert page.locator("#task option").all_inner_texts() == ["ticket", "strict", "mail"]
            page.fill("#field-text", "I was charged twice, please refund me")
            page.fill("#field-customer", '{"name": "Ada", "plan": "pro"}')
            page.fill("#field-attachments", "1")
            page.click("#decide")
            page.wait_for_selector("#answer:not([hidden])")
            fields = page.locator("#decision .field")
            assert fields.count() == 6
            priority = page.locator('[data-field="priority"]')
            assert priority.locator(".bar-row").count() == 2
            assert priority.locator(".bar-row.chosen").count() == 1
            assert "answered" in priority.locator(".outcome").inner_text()
            assert "1 decision pass ·" in page.inner_text("#usage")
            assert "generation pass" not in page.inner_text("#usage")
            page.select_option("#task", "strict")
            # The form is rebuilt when the task's schema arrives; until then the ticket's fields stand.
            page.wait_for_selector("#field-customer", state="detached")
            page.fill("#field-text", "long " * 200)
            page.click("#decide")
            page.wait_for_selector("#error:not([hidden])")
            assert "over the limit" in page.inner_text("#error")
            page.select_option("#task", "ticket")
            page.wait_for_selector("#field-customer")
            page.fill("#field-text", "My login is broken since Tuesday")
            page.fill("#field-customer", '{"name": "Ada"}')
            page.click("#decide")
            page.wait_for_selector("#answer:not([hidden])")
            page.select_option("#task", "mail")
            page.wait_for_selector("#field-body")
            page.fill("#field-body", "Win a free cruise now!")
            page.click("#decide")
            page.wait_for_selector('[data-field="subject"] .text-value')
            assert page.locator("#decision .field").count() == 4
            assert page.locator('[data-field="subject"] .bar-row').count() == 0
            assert "1 decision pass ·" in page.inner_text("#usage")
            assert re.search(r"\d+ generation pass(es)? wrote \d+ tokens", page.inner_text("#usage"))
            page.screenshot(path=str(screenshot), full_page=True)
            assert not errors, errors
        finally:
            browser.close()
    assert screenshot.stat().st_size > 10_000


@pytest.mark.slow
def test_the_api_docs_render_offline_from_installed_assets(base_url, tmp_path):
    """`/schema` in Chromium with every request off this server refused: Swagger UI still lists the routes."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, args=FLAGS, headless=True,
            viewport={"width": 1100, "height": 1300},
        )
        try:
            elsewhere: list[str] = []

            def only_this_server(route) -> None:
                if route.request.url.startswith(base_url):
                    route.continue_()
                else:
                    elsewhere.append(route.request.url)
                    route.abort()

            browser.route("**/*", only_this_server)
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(base_url + "/schema")
            page.wait_for_selector(".opblock-summary-path")
            paths = set(page.locator(".opblock-summary-path").all_inner_texts())
            assert {"/v1/decide/ticket", "/v1/decide/mail/batch", "/v1/tasks"} <= {p.strip() for p in paths}
            assert "Jev decision service" in page.inner_text(".info")
            assert not elsewhere, f"the docs page asked for {elsewhere}"
            assert not errors, errors
        finally:
            browser.close()

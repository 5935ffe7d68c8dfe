"""Render an HTML page (a path or a URL) to a PNG with headless Chromium, to look at what a person sees.

    python benchmarks/screenshot.py reports/mail/report.html /tmp/report.png [--size 1300,2400]

Chromium runs with a throw-away profile and no background networking, so a screenshot of a local
report never reaches the network. Without a Chromium on PATH the script says so and exits 0: the
screenshot is a convenience, not a check (`apt-get install -y chromium` on Debian).
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def page_url(page: str) -> str:
    """A URL as given; a file path as an absolute file:// URL, refusing a path that does not exist."""
    if "://" in page:
        return page
    path = Path(page).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no such page: {path}")
    return path.as_uri()


def screenshot(page: str, out: Path, size: tuple[int, int] = (1300, 2400), timeout_s: float = 60.0) -> Path | None:
    """Write a PNG of `page` to `out`; return None (and say why) when no Chromium is installed."""
    browser = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    if browser is None:
        print(f"skipping the screenshot: none of {', '.join(BROWSERS)} is on PATH", file=sys.stderr)
        return None
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jev-chromium-") as profile:
        command = [
            browser,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={out}",
            f"--window-size={size[0]},{size[1]}",
            page_url(page),
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if result.returncode != 0 or not out.is_file():
        raise RuntimeError(f"{browser} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", help="an HTML file path or a URL")
    parser.add_argument("out", type=Path, help="PNG to write")
    parser.add_argument("--size", default="1300,2400", help="window WIDTH,HEIGHT in pixels")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split(","))
    written = screenshot(args.page, args.out, (width, height))
    if written is not None:
        print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

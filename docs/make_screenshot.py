"""Make the README's screenshot of the HTML report from a real demo run.

Runs ``otel-ext demo`` into a temporary folder, renders its ``report.html`` in headless
Chromium and writes ``docs/images/report.png``. Run from the project root:

    .venv/bin/python docs/make_screenshot.py [--seed N] [--chromium PATH]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--out", default=str(ROOT / "docs" / "images" / "report.png"))
    parser.add_argument("--size", default="1280,2000", help="window WIDTH,HEIGHT")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        demo = Path(tmp) / "demo"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "otel_ext.cli",
                "demo",
                "--seed",
                str(args.seed),
                "--out",
                str(demo),
            ],
            check=True,
        )
        profile = Path(tmp) / "profile"
        subprocess.run(
            [
                args.chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={args.size}",
                f"--screenshot={args.out}",
                (demo / "report.html").as_uri(),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

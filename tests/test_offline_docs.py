"""Data Docs offline (jobs/check/offline_docs.py): every CDN asset GX's installed templates
load is one the project vendors, and the vendored files are the pinned packages' files.
(tests/test_expectations.py opens a real site in Chromium with the network refused.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import great_expectations

from jobs.check.offline_docs import CDN_FILES, PACKAGES, _localize, ensure_assets

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = Path(great_expectations.__file__).parent / "render" / "view" / "templates"


def test_every_cdn_asset_of_the_installed_gx_templates_is_vendored() -> None:
    """A GX upgrade that loads a new script or stylesheet from a CDN fails here."""
    used = set()
    for template in TEMPLATES.rglob("*.j2"):
        used |= set(re.findall(r"""<(?:script|link)\b[^>]*\b(?:src|href)=["'](https?://[^"']+)""",
                               template.read_text(encoding="utf-8")))
    assert used == set(CDN_FILES)


def test_the_vendored_files_exist_in_the_pinned_packages() -> None:
    root = ensure_assets()
    for name, path in CDN_FILES.values():
        assert (root / PACKAGES[name].folder / path).stat().st_size > 0, (name, path)
    fonts = root / PACKAGES["@fortawesome/fontawesome-free"].folder / "webfonts"
    assert any(fonts.glob("*.woff2"))  # all.min.css loads them from ../webfonts


def test_localizing_rewrites_each_known_tag_and_drops_its_integrity() -> None:
    page = ('<script src="https://code.jquery.com/jquery-3.7.1.min.js"></script>\n'
            '<script src="https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js"'
            ' integrity="sha384-x" crossorigin="anonymous"></script>\n'
            '<script src="https://example.org/other.js"></script>\n'
            '<a href="https://code.jquery.com/jquery-3.7.1.min.js">a link stays</a>')
    localized, count = _localize(page, "../static/vendor")
    assert count == 2
    assert '<script src="../static/vendor/jquery@3.7.1/dist/jquery.min.js"></script>' in localized
    assert ('<script src="../static/vendor/bootstrap@4.3.1/dist/js/bootstrap.min.js"></script>'
            in localized)
    assert "https://example.org/other.js" in localized and "a link stays" in localized


def test_processes_fetching_at_once_all_get_the_complete_assets(tmp_path: Path) -> None:
    """The first checks on a fresh machine (test lanes, brokers of one night) fetch together."""
    cache = tmp_path / "assets"
    fetch = ("import sys; from pathlib import Path; from jobs.check.offline_docs import "
             "ensure_assets; print(ensure_assets(Path(sys.argv[1])))")
    running = [subprocess.Popen([sys.executable, "-c", fetch, str(cache)], cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for _ in range(4)]
    for process in running:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        assert out.strip() == str(cache)
    assert sorted(p.name for p in cache.iterdir()) == sorted(p.folder for p in PACKAGES.values())
    for name, path in CDN_FILES.values():
        assert (cache / PACKAGES[name].folder / path).stat().st_size > 0

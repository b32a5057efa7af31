"""Data Docs that open with no network: the scripts and styles GX's pages load from CDNs,
installed from the npm registry and referenced locally.

GX 1.x's Data Docs templates load jQuery, Bootstrap, bootstrap-table, Font Awesome and Vega
from CDNs (unpkg, jsDelivr, cdnjs, stackpath). The site index draws its tables with
bootstrap-table from data in the page, so in a closed network it renders blank. GX offers
no setting for local assets (its site builder takes custom styles and views, not script
sources), so after each site build the pages are rewritten: every known CDN address becomes
a relative path into ``static/vendor/`` of the site, which holds the same files taken from
the packages' npm tarballs. Tarballs are fetched once into ``$RMQ_ASSETS_CACHE`` (default
``.cache/datadocs-assets``) and checked against the sha512 the registry publishes, pinned
here like a lock file. A CDN address this table does not know (a GX upgrade) is left as it
is and reported by :func:`external_references`, which the tests require to be empty.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import shutil
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from jobs.lakehouse.jars import REPO_ROOT

REGISTRY = "https://registry.npmjs.org"
DEFAULT_CACHE = REPO_ROOT / ".cache" / "datadocs-assets"
COMPLETE_MARKER = ".complete"


@dataclass(frozen=True)
class NpmPackage:
    name: str
    version: str
    integrity: str  # the registry's dist.integrity: "sha512-<base64>"
    files: tuple[str, ...]  # paths in the package (under package/); a trailing / is a folder

    @property
    def tarball_url(self) -> str:
        return f"{REGISTRY}/{self.name}/-/{self.name.split('/')[-1]}-{self.version}.tgz"

    @property
    def folder(self) -> str:
        return f"{self.name.replace('/', '__')}@{self.version}"


_FILTER = "dist/extensions/filter-control/bootstrap-table-filter-control"
PACKAGES = {p.name: p for p in (
    NpmPackage("jquery", "3.7.1", "sha512-m4avr8yL8kmFN8psrbFFFmB/If14iN5o9nw/NgnnM+kybDJpRsAyn"
               "V2BsfpTYrTRysYUdADVD7CkUUizgkpLfg==", ("dist/jquery.min.js",)),
    NpmPackage("bootstrap", "4.3.1", "sha512-rXqOmH1VilAt2DyPzluTi2blhk17bO7ef+zLLPlWvG494pDxcM2"
               "34pJ8wTc/6R40UWizAIIMgxjvxZg5kmsbag==",
               ("dist/css/bootstrap.min.css", "dist/js/bootstrap.min.js")),
    NpmPackage("popper.js", "1.12.9", "sha512-s0EEi9xiSCdqz9lV4IiVH5yIZnDX/U1t0tCjB+0jXx9jW8lrR7k"
               "OpVupiUg175ogqVoudpDXHF1p6dKATCHMeg==", ("dist/umd/popper.min.js",)),
    NpmPackage("bootstrap-table", "1.19.1", "sha512-WvV+l1AI/C+zThaKmfHmi/IuayVNB0qdFyEhFx1jyZhO0"
               "oLtNJNANkCR3rvJf6Dkh72dsLElxpE/bzK9seEQLA==",
               ("dist/bootstrap-table.min.js", "dist/bootstrap-table.min.css",
                f"{_FILTER}.min.js", f"{_FILTER}.min.css", f"{_FILTER}.css")),
    NpmPackage("bootstrap-datepicker", "1.9.0", "sha512-9rYYbaVOheGYxjOr/+bJCmRPihfy+LkLSg4fIFMT9"
               "Od8WwWB/MB50w0JO1eBgKUMbb7PFHQD5uAfI3ArAxZRXA==",
               ("dist/js/bootstrap-datepicker.min.js", "dist/css/bootstrap-datepicker.min.css")),
    NpmPackage("@fortawesome/fontawesome-free", "6.6.0", "sha512-60G28ke/sXdtS9KZCpZSHHkCbdsOGEhI"
               "UGlwq6yhY74UpTiToIh8np7A8yphhM4BWsvNFtIvLpi4co+h9Mr9Ow==",
               ("css/all.min.css", "webfonts/")),  # the css finds its fonts at ../webfonts
    NpmPackage("@forevolve/bootstrap-dark", "1.1.0", "sha512-A3ucpEpxPoTVO490lZZCfjPXxv832l7mm1Ix"
               "X3bXyxvgwnPGXDLyh7dWrphXKO8YBAu3EswbBEu3VSW8NRMW3A==",
               ("dist/css/bootstrap-prefers-dark.css",)),
    NpmPackage("vega", "5.33.1", "sha512-1fArfVDUqVbb5z8n+/nVQb+VNBzx8svY6CrsyTK4Ujm4yrd9I1auoKxBA"
               "PXLCavY1LcrbHUskQbGUP8gXOzyQw==", ("build/vega.min.js",)),
    NpmPackage("vega-lite", "5.23.0", "sha512-l4J6+AWE3DIjvovEoHl2LdtCUkfm4zs8Xxx7INwZEAv+XVb6kR6v"
               "IN1gt3t2gN2gs/y4DYTs/RPoTeYAuEg6mA==", ("build/vega-lite.min.js",)),
    NpmPackage("vega-embed", "6.29.0", "sha512-PmlshTLtLFLgWtF/b23T1OwX53AugJ9RZ3qPE2c01VFAbgt3/GS"
               "NI/etzA/GzdrkceXFma+FDHNXUppKuM0U6Q==", ("build/vega-embed.min.js",)),
)}

#: Every CDN address GX 1.x's templates use -> (npm package, file in it). The templates ask
#: for majors (vega@5) and one 1.19.0 stylesheet: the pinned packages serve them.
CDN_FILES: dict[str, tuple[str, str]] = {
    "https://cdn.jsdelivr.net/npm/vega@5": ("vega", "build/vega.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-lite@5": ("vega-lite", "build/vega-lite.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-embed@6": ("vega-embed", "build/vega-embed.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css":
        ("@fortawesome/fontawesome-free", "css/all.min.css"),
    "https://code.jquery.com/jquery-3.7.1.min.js": ("jquery", "dist/jquery.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js":
        ("popper.js", "dist/umd/popper.min.js"),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js":
        ("bootstrap", "dist/js/bootstrap.min.js"),
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css":
        ("bootstrap", "dist/css/bootstrap.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js":
        ("bootstrap-table", "dist/bootstrap-table.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css":
        ("bootstrap-table", "dist/bootstrap-table.min.css"),
    f"https://unpkg.com/bootstrap-table@1.19.1/{_FILTER}.min.js":
        ("bootstrap-table", f"{_FILTER}.min.js"),
    f"https://unpkg.com/bootstrap-table@1.19.0/{_FILTER}.min.css":
        ("bootstrap-table", f"{_FILTER}.min.css"),
    f"https://unpkg.com/bootstrap-table@1.19.0/{_FILTER}.css":
        ("bootstrap-table", f"{_FILTER}.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/"
    "bootstrap-datepicker.min.js": ("bootstrap-datepicker", "dist/js/bootstrap-datepicker.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/"
    "bootstrap-datepicker.min.css":
        ("bootstrap-datepicker", "dist/css/bootstrap-datepicker.min.css"),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/"
    "bootstrap-prefers-dark.css":
        ("@forevolve/bootstrap-dark", "dist/css/bootstrap-prefers-dark.css"),
}
#: A <script src> or <link href> to the network: group 2 is the address, group 1 its quote.
EXTERNAL_ASSET = re.compile(r"""<(?:script|link)\b[^>]*?\b(?:src|href)=(["'])(https?://[^"']+)\1[^>]*>""")
#: Subresource-integrity attributes: the hashes are the CDN files', and a file:// page cannot
#: satisfy crossorigin="anonymous" anyway.
_SRI = re.compile(r"""\s+(?:integrity|crossorigin)=["'][^"']*["']""")


class AssetsError(RuntimeError):
    """A package could not be fetched, or its tarball is not the one pinned."""


def assets_cache() -> Path:
    return Path(os.environ.get("RMQ_ASSETS_CACHE") or DEFAULT_CACHE)


def ensure_assets(cache: Path | None = None) -> Path:
    """The folder holding every pinned package's files, fetched once (verified)."""
    root = cache or assets_cache()
    for package in PACKAGES.values():
        target = root / package.folder
        if not (target / COMPLETE_MARKER).exists():
            _install(package, target)
    return root


def _install(package: NpmPackage, target: Path) -> None:
    try:
        with urllib.request.urlopen(package.tarball_url, timeout=60) as response:
            tarball = response.read()
    except OSError as error:
        raise AssetsError(f"could not fetch {package.tarball_url}: {error}") from None
    algorithm, _, expected = package.integrity.partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, tarball).digest()).decode("ascii")
    if actual != expected:
        raise AssetsError(f"{package.tarball_url}: {algorithm} {actual} is not the pinned "
                          f"{expected}")
    # Checks of several brokers (and the test lanes) may fetch at once: each process fills a
    # staging folder of its own and renames it into place; a loser finds the winner's.
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.", suffix=".partial",
                                    dir=target.parent))
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        for member in archive.getmembers():
            path = member.name.removeprefix("package/")
            if member.isfile() and any(path == f or (f.endswith("/") and path.startswith(f))
                                       for f in package.files):
                destination = staging / path
                destination.parent.mkdir(parents=True, exist_ok=True)
                destination.write_bytes(archive.extractfile(member).read())  # type: ignore[union-attr]
    missing = [f for f in package.files if not (staging / f).exists()]
    if missing:
        shutil.rmtree(staging, ignore_errors=True)
        raise AssetsError(f"{package.name}@{package.version} has no {', '.join(missing)}")
    (staging / COMPLETE_MARKER).write_text(package.integrity + "\n")
    if target.exists() and not (target / COMPLETE_MARKER).exists():
        shutil.rmtree(target, ignore_errors=True)  # left by a process that died mid-way
    try:
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / COMPLETE_MARKER).exists():
            raise


def localize_site(site: Path, assets: Path | None = None, *,
                  built_since: float | None = None) -> int:
    """Point the pages of the Data Docs ``site`` at local copies of their CDN assets;
    returns how many references were rewritten.

    A site build writes only its run's pages and the index, and the site keeps every
    night's pages: with ``built_since`` (epoch seconds) only pages written since then are
    read, so the cost of a night does not grow with the nights before it. A site without
    ``static/vendor`` yet (its first localized build) has every page rewritten."""
    source = assets or ensure_assets()
    vendor = site / "static" / "vendor"
    every_page = built_since is None or not vendor.is_dir()
    for package in PACKAGES.values():
        if not (vendor / package.folder / COMPLETE_MARKER).exists():  # copied once per site
            shutil.copytree(source / package.folder, vendor / package.folder,
                            dirs_exist_ok=True)
    rewritten = 0
    for page in site.rglob("*.html"):
        if not every_page and page.stat().st_mtime < built_since:  # type: ignore[operator]
            continue
        text = page.read_text(encoding="utf-8")
        relative = Path(os.path.relpath(vendor, page.parent)).as_posix()
        localized, count = _localize(text, relative)
        if count:
            page.write_text(localized, encoding="utf-8")
            rewritten += count
    return rewritten


def _localize(html: str, vendor: str) -> tuple[str, int]:
    count = 0

    def local(tag: re.Match[str]) -> str:
        nonlocal count
        known = CDN_FILES.get(tag.group(2))
        if known is None:
            return tag.group(0)
        count += 1
        name, path = known
        address = f'"{vendor}/{PACKAGES[name].folder}/{path}"'
        return _SRI.sub("", tag.group(0).replace(tag.group(1) + tag.group(2) + tag.group(1),
                                                  address))

    return EXTERNAL_ASSET.sub(local, html), count


def external_references(site: Path) -> dict[str, list[str]]:
    """Scripts and stylesheets the site's pages still load from the network, per page."""
    found = {}
    for page in sorted(site.rglob("*.html")):
        urls = [tag.group(2) for tag in EXTERNAL_ASSET.finditer(page.read_text(encoding="utf-8"))]
        if urls:
            found[str(page.relative_to(site))] = urls
    return found


def main() -> int:
    """``python -m jobs.check.offline_docs``: fetch the pinned packages (if needed)."""
    root = ensure_assets()
    for package in PACKAGES.values():
        print(f"{package.name}@{package.version}  {root / package.folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Text extractors for the mini corpus: Debian-packaged text -> (domain, pieces of text).

Each stand-in reads only files that ``dpkg -L <package>`` lists for the packages named in SOURCES
(installed by env/setup.sh from env/apt-packages.txt), so the corpus depends on package versions,
which the manifest records, and not on whatever else a machine has installed.
"""

from __future__ import annotations

import gzip
import html.parser
import re
import subprocess
from pathlib import Path

from . import DataPrepError

# domain key -> (packages, what it stands in for). mini_corpus.py and README.md describe the same.
SOURCES: dict[str, tuple[tuple[str, ...], str]] = {
    "pile_cc": (("debian-reference-en",), "Debian Reference (HTML to text): general web-page prose"),
    "pubmed_central": (("perl-doc",), "perl manual pages (POD): long technical articles"),
    "arxiv": (("manpages-dev",), "C library man pages, raw groff: markup-heavy technical writing"),
    "github": (("libpython3-stdlib-sources",), "Python standard library sources"),
    "freelaw": (("base-files",), "/usr/share/common-licenses and Debian copyright files: legal text"),
    "stackexchange": (("perl-doc",), "perlfaq questions and answers"),
    "uspto_backgrounds": (("manpages",), "Linux man pages (sections 1,4,5,7,8) as plain text: "
                                         "technical descriptions"),
    "pubmed_abstracts": (("dict-foldoc",), "FOLDOC entries: short expert definitions"),
    "gutenberg_pg19": (("dict-devil", "dict-gcide"), "The Devil's Dictionary (a Project Gutenberg "
                                                    "book) and Webster 1913 quotations"),
    "wikipedia_en": (("dict-gcide",), "GCIDE (Webster 1913) entries: encyclopedic definitions"),
    "dm_mathematics": ((), "generated arithmetic/algebra question-answer pairs (seeded)"),
    "ubuntu_irc": (("fortunes",), "fortune cookies, many as short dialogues, one per line"),
    "europarl": (("manpages-de", "manpages-fr", "manpages-es"), "German/French/Spanish man pages: "
                                                                "multilingual prose"),
    "hackernews": (("dict-jargon",), "The Jargon File: hacker-culture commentary"),
    "philpapers": (("gnu-standards", "doc-debian"), "GNU coding standards, Debian constitution, "
                                                    "social contract, manifesto: normative essays"),
    "nih_exporter": (("developers-reference",), "Debian Developer's Reference (rst): "
                                                "institutional/procedural prose"),
    "enron_emails": (("*changelogs*", "doc-debian"), "Debian changelog entries rendered as e-mails, "
                                                     "BTS mail-server instructions"),
}
# Packages whose changelog entries make the Enron stand-in.
CHANGELOG_PACKAGES = ("dict-gcide", "dict-foldoc", "dict-jargon", "dict-devil", "fortunes", "perl-doc",
                      "manpages", "manpages-de", "gnu-standards", "base-files", "doc-debian",
                      "developers-reference", "debian-reference-en", "zstd", "cmake", "git",
                      "openmpi-bin", "libhdf5-dev", "hdf5-tools", "libopenblas-dev")


def python_stdlib_package() -> str:
    """libpython3.N-stdlib of the system python3 (N depends on the Debian release)."""
    out = _run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\\n", "libpython3.*-stdlib"])
    names = sorted((int(m.group(1)), m.group(0)) for line in out.splitlines()
                   if line.split()[1:2] == ["ii"]
                   and (m := re.fullmatch(r"libpython3\.(\d+)-stdlib", line.split()[0])))
    names = [n for _, n in names]
    if not names:
        raise DataPrepError("no libpython3.N-stdlib package installed (run env/setup.sh)")
    return names[-1]


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""


def package_files(pkg: str) -> list[Path]:
    """Regular files of an installed package, sorted (the corpus must not depend on dpkg's order)."""
    out = _run(["dpkg", "-L", pkg])
    if not out:
        raise DataPrepError(f"Debian package {pkg!r} is not installed; run `bash env/setup.sh` "
                            f"(it installs env/apt-packages.txt)")
    return sorted(p for p in map(Path, out.splitlines()) if p.is_file() and not p.is_symlink())


def package_version(pkg: str) -> str:
    return _run(["dpkg-query", "-W", "-f", "${Version}", pkg]).strip()


def read_text(path: Path) -> str:
    raw = gzip.open(path).read() if path.suffix in (".gz", ".dz") else path.read_bytes()
    return raw.decode("utf-8", errors="replace")


# ---- markup strippers: rough on purpose; the point is plausible text, not perfect rendering ----


class _HTMLText(html.parser.HTMLParser):
    BLOCK = {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "tr", "pre", "table", "dt", "dd"}

    def __init__(self):
        super().__init__()
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "head"):
            self.skip += 1
        elif tag in self.BLOCK:
            self.parts.append("\n\n" if tag != "br" else "\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style", "head"):
            self.skip = max(0, self.skip - 1)

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


def html_to_text(s: str) -> str:
    p = _HTMLText()
    p.feed(s)
    text = "".join(p.parts).replace("\xa0", " ")
    text = "\n".join(line.strip() for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", text).strip()


_GROFF_ESC = [(r"\\f(\(..|\[[^\]]*\]|.)", ""), (r"\\\(em", "—"), (r"\\\(en", "–"), (r"\\\(aq", "'"),
              (r"\\\(dq", '"'), (r"\\\(bu", "*"), (r"\\-", "-"), (r"\\e", "\\\\"), (r"\\&", ""),
              (r"\\\*(\(..|\[[^\]]*\]|.)", ""), (r"\\\(..", ""), (r"\\\[[^\]]*\]", ""), (r"\\[ ~0|^]", " "),
              (r"\\s[-+]?\d", ""), (r"\\c", "")]


def groff_to_text(s: str) -> str:
    out = []
    for line in s.splitlines():
        if line.startswith(('.\\"', "'\\\"")):
            continue
        if line.startswith("."):
            m = re.match(r"\.(\w+)\s*(.*)", line)
            if not m:
                continue
            macro, args = m.groups()
            if macro in ("SH", "SS"):
                out.append("\n" + args.strip('"') + "\n")
            elif macro in ("B", "I", "BR", "IR", "RB", "RI", "BI", "IB", "SM", "SB"):
                words = re.findall(r'"[^"]*"|\S+', args)
                joiner = " " if macro in ("B", "I", "SM", "SB") else ""
                out.append(joiner.join(w.strip('"') for w in words))
            elif macro in ("PP", "LP", "P", "TP", "IP", "sp", "br"):
                out.append("")
                if macro == "IP" and args:
                    out.append(args.split()[0].strip('"'))
            continue
        out.append(line)
    text = "\n".join(out)
    for pat, rep in _GROFF_ESC:
        text = re.sub(pat, rep, text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def pod_to_text(s: str) -> str:
    out = []
    for line in s.splitlines():
        if line.startswith("="):
            m = re.match(r"=(head\d|item)\s*(.*)", line)
            if m:
                out.append(m.group(2))
            continue
        out.append(line)
    text = "\n".join(out)
    for _ in range(3):  # nested formatting codes: B<C<x>>
        text = re.sub(r"[A-Z]<<+\s(.*?)\s>+>", r"\1", text)
        text = re.sub(r"[BICFSXZE]<([^<>]*)>", r"\1", text)
        text = re.sub(r"L<(?:[^<>|]*\|)?([^<>]*)>", r"\1", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


# ---- dictd databases (.index + .dict.dz, dictzip is gzip-compatible) ----

_B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def _b64num(s: str) -> int:
    n = 0
    for c in s:
        n = n * 64 + _B64[c]
    return n


def dictd_entries(pkg: str) -> list[str]:
    """Entries of a dictd database, in index order, metadata (00-database-*) left out."""
    files = package_files(pkg)
    dz = next((f for f in files if f.name.endswith(".dict.dz")), None)
    if dz is None:
        raise DataPrepError(f"package {pkg}: no .dict.dz file")
    index = dz.with_name(dz.name[: -len(".dict.dz")] + ".index")
    if not index.exists():
        raise DataPrepError(f"{index}: missing dictd index")
    data = gzip.open(dz).read()
    seen, entries = set(), []
    for line in index.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0].startswith(("00database", "00-database")):
            continue
        span = (_b64num(parts[1]), _b64num(parts[2]))
        if span in seen:
            continue
        seen.add(span)
        entries.append(data[span[0]: span[0] + span[1]].decode("utf-8", errors="replace").strip())
    return entries


# ---- per-domain piece extractors: each returns a list of texts in a deterministic order ----


def _man_pages(pkg: str, sections: str, raw: bool) -> list[str]:
    pieces = []
    for f in package_files(pkg):
        if not re.search(rf"/man[{sections}]/[^/]+\.gz$", str(f)):
            continue
        s = read_text(f)
        if s.lstrip().startswith(".so ") and s.count("\n") < 3:
            continue  # a redirect to another page
        pieces.append(s if raw else groff_to_text(s))
    return pieces


def _split_on(pattern: str, text: str) -> list[str]:
    return [p.strip() for p in re.split(pattern, text, flags=re.M) if p and p.strip()]


def pieces_for(domain: str) -> list[str]:
    """All candidate pieces of text for one stand-in domain (dm_mathematics is generated elsewhere)."""
    if domain == "pile_cc":
        return [html_to_text(read_text(f)) for f in package_files("debian-reference-en")
                if f.suffix == ".html"]
    if domain == "pubmed_central":
        return [pod_to_text(read_text(f)) for f in package_files("perl-doc")
                if f.name.endswith(".pod") and not f.name.startswith(("perlfaq", "perl5"))]
    if domain == "stackexchange":
        out = []
        for f in package_files("perl-doc"):
            if re.fullmatch(r"perlfaq\d\.pod", f.name):
                out += [pod_to_text("=head2 " + q) for q in re.split(r"^=head2 ", read_text(f), flags=re.M)[1:]]
        return out
    if domain == "arxiv":
        return _man_pages("manpages-dev", "23", raw=True)
    if domain == "uspto_backgrounds":
        return _man_pages("manpages", "14578", raw=False)
    if domain == "europarl":
        return [p for pkg in ("manpages-de", "manpages-fr", "manpages-es") for p in _man_pages(pkg, "1-8", raw=False)]
    if domain == "github":
        return [read_text(f) for f in package_files(python_stdlib_package()) if f.suffix == ".py"]
    if domain == "freelaw":
        texts = [read_text(f) for f in package_files("base-files") if "/common-licenses/" in str(f)]
        for pkg in CHANGELOG_PACKAGES:
            texts += [read_text(f) for f in package_files(pkg) if f.name == "copyright"]
        return sorted(set(texts))
    if domain == "pubmed_abstracts":
        return dictd_entries("dict-foldoc")
    if domain == "wikipedia_en":
        return dictd_entries("dict-gcide")
    if domain == "hackernews":
        return dictd_entries("dict-jargon")
    if domain == "gutenberg_pg19":
        book = "\n\n".join(dictd_entries("dict-devil"))
        return _split_on(r"\n\s*\n(?=[A-Z][A-Z'-]+, )", book) or [book]
    if domain == "ubuntu_irc":
        out = []
        for f in package_files("fortunes"):
            if "/fortunes/" in str(f) and not f.suffix:
                out += _split_on(r"^%$", read_text(f))
        return out
    if domain == "philpapers":
        texts = [read_text(f) for f in package_files("gnu-standards") if f.name.endswith(".text.gz")]
        texts += [read_text(f) for f in package_files("doc-debian")
                  if re.search(r"(constitution\.txt|social-contract\.txt|manifesto)", f.name)]
        return [p for t in texts for p in _split_on(r"\n(?=\d+(?:\.\d+)* [A-Z])", t) if p]
    if domain == "nih_exporter":
        return [p for f in package_files("developers-reference") if f.name.endswith(".rst.txt")
                for p in _split_on(r"\n(?=.+\n[-=~^]{4,}\n)", read_text(f))]
    if domain == "enron_emails":
        out = []
        for pkg in CHANGELOG_PACKAGES:
            for f in package_files(pkg):
                if f.name == "changelog.Debian.gz":
                    out += changelog_as_emails(read_text(f))
        out += [read_text(f) for f in package_files("doc-debian")
                if f.name.startswith(("bug-", "mailing-lists"))]
        return out
    raise KeyError(domain)


def changelog_as_emails(text: str) -> list[str]:
    """Each Debian changelog entry as a short e-mail: From/Date/Subject headers, then the body."""
    mails = []
    for entry in re.split(r"\n(?=\S+ \([^)]*\) )", text):
        lines = entry.strip().splitlines()
        if not lines:
            continue
        sig = next((l for l in reversed(lines) if l.startswith(" -- ")), None)
        m = re.match(r" -- (.*?<[^>]+>)\s+(.*)", sig or "")
        if not m:
            continue
        body = "\n".join(l for l in lines[1:] if l is not sig).strip()
        mails.append(f"From: {m.group(1)}\nDate: {m.group(2)}\nSubject: {lines[0].strip()}\n\n{body}\n")
    return mails

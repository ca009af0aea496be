"""docs/DESIGN.md against the code it describes.

- Every citation of a section, `DESIGN.md, "<section>"` (or `DESIGN.md ("<section>")`), in the source,
  tests, analysis, data_prep, bench, jobs, slurm and env names a heading of docs/DESIGN.md.
- The "How to add" checklists name only files that exist (a name with a <placeholder> must have an
  existing folder before it), and every file that the commits named after "Followed by:" touched, and
  that still exists, is named by its checklist (literally or through a <placeholder>), so a checklist
  lists what following it really took. The commit check needs the git history; without it, it skips.
- The floors table of "Architecture" holds: every `#include "..."` of src/ stays within what its
  folder may include, only backend/backend.cpp reaches into both backends, and CUDA headers stay in
  src/backend/cuda and src/dist/nccl.*.
"""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "DESIGN.md"
CITING_FOLDERS = ("src", "tests", "analysis", "data_prep", "bench", "jobs", "slurm", "env")
TEXT_SUFFIXES = {".cpp", ".hpp", ".cu", ".cuh", ".h", ".py", ".sh", ".ini", ".md", ".txt", ".cmake"}
CITATION = re.compile(r'DESIGN\.md,?\s*\(?\s*"([^"]+)"')
CHECKLIST_PREFIX = "How to add"


def doc_text():
    return DOC.read_text(encoding="utf-8")


def headings(text):
    return {m.group(2).strip() for m in re.finditer(r"^(#{1,6})\s+(.+?)\s*$", text, re.M)}


def sections(text):
    """{heading: body} of the level-2 sections."""
    parts = re.split(r"^## (.+?)\s*$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def citing_files():
    for folder in CITING_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name == "CMakeLists.txt") \
                    and path != Path(__file__).resolve():
                yield path


def citations(text):
    """The section names cited in a file, also where a comment wraps the citation over two lines."""
    unwrapped = re.sub(r"\n\s*(?://|#|\*)?\s*", " ", text)
    return set(CITATION.findall(text)) | set(CITATION.findall(unwrapped))


def test_design_doc_exists_with_its_sections():
    heads = headings(doc_text())
    for name in ("Architecture", "Floors", "The generic attention operation", "Measuring the sink",
                 "HDF5 results", "The GPU path", "How to add an attention variant", "How to add an HF family",
                 "How to add a CUDA kernel", "How to add a report section or figure"):
        assert name in heads, f"docs/DESIGN.md has no heading '{name}'"


def test_every_cited_section_is_a_heading():
    heads = headings(doc_text())
    cited, missing = 0, []
    for path in citing_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for name in citations(text):
            cited += 1
            if name not in heads:
                missing.append(f"{path.relative_to(ROOT)}: \"{name}\"")
    assert not missing, "cited sections that docs/DESIGN.md lacks:\n" + "\n".join(missing)
    assert cited >= 8, f"only {cited} citations found: is the pattern still the one the code uses?"


def checklists():
    """{section: (the checklist's file names, the commits after "Followed by:")}."""
    out = {}
    for name, body in sections(doc_text()).items():
        if not name.startswith(CHECKLIST_PREFIX):
            continue
        followed = body.split("Followed by:", 1)
        names = set(re.findall(r"`([^`\s]+)`", body))
        files = {n for n in names if "/" in n or n in ("CMakeLists.txt", "README.md")}
        commits = re.findall(r"\b([0-9a-f]{7,40})\b", followed[1]) if len(followed) == 2 else []
        out[name] = (files, commits)
    return out


def as_pattern(name):
    """A checklist name as a regex over repository paths: <x> and * stand for (part of) one path
    component, a trailing / for any file below the folder."""
    parts = re.split(r"(<[^>]+>|\*)", name)
    rx = "".join("[^/]+" if p.startswith("<") else "[^/]*" if p == "*" else re.escape(p) for p in parts)
    return re.compile(rx + (".*" if name.endswith("/") else "") + "$")


def test_checklists_name_files_that_exist():
    lists = checklists()
    assert len(lists) == 4, sorted(lists)
    for section, (files, commits) in lists.items():
        assert files, f"{section}: names no file"
        assert commits, f"{section}: says no commit after 'Followed by:'"
        for name in sorted(files):
            if "*" in name and "<" not in name:
                assert list(ROOT.glob(name)), f"{section}: `{name}` matches no file"
            elif "<" in name:
                folder = ROOT / name.split("<", 1)[0]
                folder = folder if name.split("<", 1)[0].endswith("/") else folder.parent
                assert folder.is_dir(), f"{section}: `{name}`: no folder {folder.relative_to(ROOT)}"
            else:
                assert (ROOT / name.rstrip("/")).exists(), f"{section}: `{name}` does not exist"


def git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def test_checklists_name_every_file_their_example_touched():
    if git("rev-parse", "--is-inside-work-tree").returncode != 0:
        pytest.skip("not a git checkout")
    for section, (files, commits) in checklists().items():
        patterns = [as_pattern(n) for n in files]
        for commit in commits:
            if git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
                pytest.skip(f"commit {commit} is not in this clone's history (shallow clone?)")
            touched = git("show", "--name-only", "--format=", commit).stdout.split()
            unnamed = [p for p in touched if (ROOT / p).exists() and not any(rx.match(p) for rx in patterns)]
            assert not unnamed, f"{section}: {commit} touched {unnamed}, which the checklist does not name"


def floors():
    """{folder: (folders it may include, single headers it may include)} from the floors table."""
    body = sections(doc_text())["Architecture"]
    rows = re.findall(r"^\|\s*\d+\s*\|\s*`(\w+)`\s*\|([^|]*)\|", body, re.M)
    out = {}
    for folder, allowed in rows:
        names = re.findall(r"`([^`]+)`", allowed)
        out[folder] = ({n for n in names if "/" not in n} | {folder}, {n for n in names if "/" in n})
    return out


def test_floors_table_covers_src():
    table = floors()
    folders = {p.name for p in (ROOT / "src").iterdir() if p.is_dir()}
    assert set(table) == folders, f"floors table {sorted(table)} vs src/ {sorted(folders)}"


def test_includes_keep_to_the_floors():
    table = floors()
    wrong = []
    for path in sorted((ROOT / "src").rglob("*")):
        if path.suffix not in {".cpp", ".hpp", ".cu", ".cuh"}:
            continue
        rel = path.relative_to(ROOT / "src")
        folder = rel.parts[0]
        folders, headers = table[folder]
        for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if m:
                inc = m.group(1)
                top = inc.split("/", 1)[0]
                if "/" in inc and top not in folders and inc not in headers:
                    wrong.append(f"src/{rel}:{line_no}: {inc} ({folder} may not include {top})")
                if inc.startswith(("backend/cpu/", "backend/cuda/")) and rel.parts[:2] != ("backend", inc.split("/")[1]) \
                        and str(rel) != "backend/backend.cpp":
                    wrong.append(f"src/{rel}:{line_no}: {inc} (only backend/backend.cpp knows both backends)")
            m = re.match(r"\s*#\s*include\s+<(cuda|cublas|cudnn|nccl|curand|cub/|mma)", line)
            if m and not (str(rel).startswith("backend/cuda/") or rel.name.startswith("nccl.")):
                wrong.append(f"src/{rel}:{line_no}: a CUDA header outside src/backend/cuda and src/dist/nccl.*")
    assert not wrong, "includes across the floors of docs/DESIGN.md:\n" + "\n".join(wrong)

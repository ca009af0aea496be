"""docs/DESIGN.md against the code it describes.

- Every citation of a section, `DESIGN.md, "<section>"` (or `DESIGN.md ("<section>")`), in the source,
  tests, analysis, data_prep, bench, jobs, slurm and env names a heading of docs/DESIGN.md.
- The "How to add" checklists name only files that exist (a name with a <placeholder> must have an
  existing folder before it), and every file that the commits named after "Followed by:" touched, and
  that still exists, is named by its checklist (literally or through a <placeholder>), so a checklist
  lists what following it really took. The commit check needs the git history; without it, it skips.
- The floors table of "Architecture" holds: every `#include "..."` of src/ stays within what its
  folder may include, only backend/backend.cpp reaches into both backends, and CUDA headers stay in
  src/backend/cuda and src/parallel/nccl.*.
- The statements the code can contradict: the CPU-only ops it names are the CPU_ONLY_OP lines of
  src/backend/op_list.hpp; the functions over the length limit of "Conventions" are those it names,
  with their lengths (exact; to 10 % where the document says "about N lines"), and no file is over its
  file limit; every repository file it cites,
  and every one a comment of src/ cites, exists (EXTERNAL_FILES: the files of other projects).
"""
import fnmatch
import functools
import glob
import re
import subprocess
from pathlib import Path

import pytest

from cpp_source import comments_of, functions

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
                wrong.append(f"src/{rel}:{line_no}: a CUDA header outside src/backend/cuda and src/parallel/nccl.*")
    assert not wrong, "includes across the floors of docs/DESIGN.md:\n" + "\n".join(wrong)


CPP_SUFFIXES = {".cpp", ".hpp", ".cu", ".cuh", ".h"}


def cpp_sources():
    return [p for p in sorted((ROOT / "src").rglob("*")) if p.suffix in CPP_SUFFIXES]


def op_list():
    """[(OP or CPU_ONLY_OP, op name)] of src/backend/op_list.hpp."""
    text = (ROOT / "src" / "backend" / "op_list.hpp").read_text(encoding="utf-8")
    return re.findall(r"^\s*(OP|CPU_ONLY_OP)\(\s*[^,]+,\s*(\w+)\s*,", text, re.M)


def stated_cpu_only_ops():
    """The ops the sentence "CPU-only ops (`CPU_ONLY_OP` lines): ..." of "Architecture" names."""
    body = sections(doc_text())["Architecture"]
    m = re.search(r"CPU-only ops \(`CPU_ONLY_OP` lines\):\s*(none|`\w+`(?:,\s*`\w+`)*)\.", body)
    assert m, 'docs/DESIGN.md, "Architecture": no sentence "CPU-only ops (`CPU_ONLY_OP` lines): none." (or a list)'
    return set(re.findall(r"`(\w+)`", m.group(1)))


def test_cpu_only_ops_are_the_op_lists():
    lines = op_list()
    assert len(lines) >= 30, f"read only {len(lines)} ops from src/backend/op_list.hpp: has its form changed?"
    listed = {name for kind, name in lines if kind == "CPU_ONLY_OP"}
    stated = stated_cpu_only_ops()
    assert stated == listed, (f"docs/DESIGN.md says the CPU-only ops are {sorted(stated) or 'none'}, "
                              f"src/backend/op_list.hpp's CPU_ONLY_OP lines are {sorted(listed) or 'none'}")


def conventions_limits():
    """(file limit, function limit, {function: (stated lines, whether "about")}) of the Conventions bullet on
    lengths."""
    body = sections(doc_text())["Conventions"]
    bullet = next((b for b in re.split(r"^- ", body, flags=re.M) if "no function over" in b), "")
    files = re.search(r"No file in `src/` over (\d+)\s+lines", bullet)
    funcs = re.search(r"no function over (\d+)\s+lines", bullet)
    assert files and funcs, 'docs/DESIGN.md, "Conventions": no bullet "No file in `src/` over N lines and no function over M lines"'
    named = {name: (int(n), bool(about))
             for name, about, n in re.findall(r"`([\w:~]+)`\s*(?:\([^)]*\))?,\s*(about\s+)?(\d+)\s+lines", bullet)}
    return int(files.group(1)), int(funcs.group(1)), named


@functools.cache
def measured_functions():
    """{function name: [(lines, where)]} of every function src/ defines."""
    out = {}
    for path in cpp_sources():
        for name, first, last in functions(path.read_text(encoding="utf-8")):
            out.setdefault(name, []).append((last - first + 1, f"{path.relative_to(ROOT)}:{first}"))
    return out


def test_function_scanner_sees_the_code():
    sample = """namespace a {
namespace {
struct Row { int x_{0}; int get() const {
    return x_; } };
enum class E : int { one, two };
const auto kLambda = [](int v) { return v; };
}  // namespace
template <class T>
T Table::lookup(int i, T fallback = T{}) const {
  auto f = [&](int j) { if (j) { return j; } return 0; };
  return f(i) ? T{} : fallback;
}
template <> int conv<float>() { return 1; }
Store::Store(int n) : n_{n}, m_(n), s_{"{"} {
  // a brace in a comment: {
}
class Plan final : public Base {
 public:
  SINKLAB_OPS(DECLARE, DECLARE)
  int size() const { return 2; }
};
extern "C" __attribute__((constructor)) void early(int, char**) {
}
}  // namespace a
"""
    assert functions(sample) == [("Row::get", 3, 4), ("Table::lookup", 9, 12), ("conv", 13, 13),
                                 ("Store::Store", 14, 16), ("Plan::size", 20, 20), ("early", 22, 23)]
    measured = measured_functions()
    assert sum(len(v) for v in measured.values()) > 500, "the scanner finds few functions in src/"
    assert "Trainer::run" in measured and "CpuBackend::attention_forward" in measured


def length_mismatches(named, measured, limit):
    """What the lengths "Conventions" states (named: {function: (lines, whether "about")}) get wrong against
    measured ({function: [(lines, where)]}): a function over the limit it does not name, one it names that is
    not over, or a stated length that is not the measured one (exactly; to 10 % where it says "about")."""
    wrong = []
    for name, found in sorted(measured.items()):
        for lines, where in found:
            if lines > limit and name not in named:
                wrong.append(f"{where}: {name} is {lines} lines, over {limit}, and \"Conventions\" does not name it")
    for name, (stated, about) in sorted(named.items()):
        lengths = measured.get(name, [])
        tolerance = 0.1 * stated if about else 0
        if not lengths:
            wrong.append(f"\"Conventions\" names {name} ({stated} lines), which src/ does not define")
        elif all(lines <= limit for lines, _ in lengths):
            wrong.append(f"\"Conventions\" names {name} as over {limit} lines; it is {lengths[0][0]} ({lengths[0][1]})")
        elif not any(abs(lines - stated) <= tolerance for lines, _ in lengths):
            said = f"about {stated}" if about else str(stated)
            wrong.append(f"\"Conventions\" says {name} is {said} lines; it is {lengths[0][0]} ({lengths[0][1]})")
    return wrong


def test_functions_over_the_limit_are_those_conventions_names():
    _, limit, named = conventions_limits()
    wrong = length_mismatches(named, measured_functions(), limit)
    assert not wrong, "docs/DESIGN.md against the functions of src/:\n" + "\n".join(wrong)


def test_stated_lengths_are_exact_unless_about():
    measured = {"f": [(109, "a.cpp:1")], "g": [(113, "b.cpp:1")]}
    assert length_mismatches({"f": (109, False), "g": (113, False)}, measured, 100) == []
    assert len(length_mismatches({"f": (108, False), "g": (113, False)}, measured, 100)) == 1  # one line off
    assert length_mismatches({"f": (104, True), "g": (105, True)}, measured, 100) == []  # "about": within 10 %
    assert len(length_mismatches({"f": (109, False)}, measured, 100)) == 1  # g over the limit, unnamed


def test_no_file_over_the_limit():
    limit = conventions_limits()[0]
    over = [f"{p.relative_to(ROOT)}: {n} lines" for p in cpp_sources()
            if (n := p.read_text(encoding="utf-8").count("\n")) > limit]
    assert not over, f"files of src/ over the {limit} lines of \"Conventions\":\n" + "\n".join(over)


# Files of other projects that comments cite for where a rule comes from: not files of this repository.
EXTERNAL_FILES = {
    "llm.c": "karpathy/llm.c, the C/CUDA trainer the bf16 step learns from (docs/DESIGN.md, The bf16 step)",
    "flash_softpick_attn.py": "the softpick authors' training kernel (backend/attention_math.hpp)",
    "model_kv_bias.py": "sail-sg/Attention-Sink's k*/v* bias model (model/config.hpp)",
    "driver/others/dynamic.c": "OpenBLAS's kernel-set choice (backend/cpu/blas.cpp)",
    "node/scaled_dot_product_flash_attention.h": "cudnn-frontend's SDPA node (backend/cuda/attention_cudnn.cpp)",
    "utils/attn_score_modifiers.h": "cudnn-frontend's masks (backend/cuda/attention_cudnn.cpp)",
    "llm.c": "karpathy's llm.c, the project (backend/cuda/attention_cudnn.cpp, DESIGN.md)",
    "cudnn_att.cpp": "llm.c's cuDNN attention on strided views (backend/cuda/attention_cudnn.cpp)",
    "modeling_*.py": "transformers' model files, each family's reference (hf/*.cpp)",
    "src/transformers/*.py": "transformers' own tree (backend/rope_math.hpp)",
}
CODE_SUFFIXES = "cpp|hpp|cu|cuh|h|c|py|sh|ini|md|txt|cmake"
# A path-like name: components of word characters (or a <placeholder>, a * glob), a code or text suffix,
# or `.*` / `.{hpp,cpp}` after a folder; not inside a longer token, a URL or a `...` elision.
CITED_FILE = re.compile(r"(?<![\w./<>*{}:-])([\w<][\w.<>*-]*(?:/[\w.<>*-]+)*\.(?:\{[\w,]+\}|\*|(?:"
                        + CODE_SUFFIXES + r")))(?![\w/({-])")


def cited_names(text):
    """[(offset, name)] of the path-like file names in text, those of EXTERNAL_FILES included."""
    out = []
    for m in CITED_FILE.finditer(text):
        name = m.group(1)
        if "..." in name or ((name.endswith(".*") or name.endswith("}")) and "/" not in name):
            continue
        out.append((m.start(1), name))
    return out


def is_external(name):
    return any(fnmatch.fnmatch(name, pattern) for pattern in EXTERNAL_FILES)


def cited_files(text):
    """[(offset, name)] of the repository file names text cites."""
    return [(at, name) for at, name in cited_names(text) if not is_external(name)]


def repository_files():
    listed = git("ls-files", "--cached", "--others", "--exclude-standard")
    if listed.returncode == 0:
        return [Path(p) for p in listed.stdout.splitlines()]
    return [p.relative_to(ROOT) for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]


def file_exists(name, folders, basenames):
    """Whether name (a <placeholder> or * standing for part of a component, {a,b} for either) is a file
    below one of folders, or, without a folder, a file's name anywhere in the repository."""
    braces = re.search(r"\{([\w,]+)\}", name)
    names = [name[:braces.start()] + alt + name[braces.end():] for alt in braces.group(1).split(",")] if braces else [name]
    for one in names:
        pattern = re.sub(r"<[^>]+>", "*", one)
        if "/" not in pattern:
            if not any(fnmatch.fnmatch(b, pattern) for b in basenames):
                return False
        elif not any(glob.glob(str(folder / pattern)) for folder in folders):
            return False
    return True


def test_files_the_document_cites_exist():
    basenames = {p.name for p in repository_files()}
    folders = (ROOT, ROOT / "src", ROOT / "src" / "backend")
    text = doc_text()
    cited = cited_files(text)
    assert len(cited) >= 100, f"only {len(cited)} file names found in docs/DESIGN.md: has the pattern gone stale?"
    missing = [f"docs/DESIGN.md:{text.count(chr(10), 0, at) + 1}: {name}" for at, name in cited
               if not file_exists(name, folders, basenames)]
    assert not missing, "files docs/DESIGN.md cites that do not exist:\n" + "\n".join(missing)


def test_files_source_comments_cite_exist():
    basenames = {p.name for p in repository_files()}
    missing, count = [], 0
    for path in cpp_sources():
        comments = comments_of(path.read_text(encoding="utf-8"))
        folders = (ROOT, ROOT / "src", ROOT / "src" / "backend", path.parent)
        for at, name in cited_files(comments):
            count += 1
            if not file_exists(name, folders, basenames):
                missing.append(f"{path.relative_to(ROOT)}:{comments.count(chr(10), 0, at) + 1}: {name}")
    assert count >= 100, f"only {count} file names found in the comments of src/: has the pattern gone stale?"
    assert not missing, "files that comments of src/ cite and that do not exist:\n" + "\n".join(missing)


def test_every_external_file_is_still_cited():
    texts = [doc_text()] + [comments_of(p.read_text(encoding="utf-8")) for p in cpp_sources()]
    names = {name for text in texts for _, name in cited_names(text)}
    unused = [p for p in EXTERNAL_FILES if not any(fnmatch.fnmatch(n, p) for n in names)]
    assert not unused, f"EXTERNAL_FILES entries nothing cites any more (drop them): {unused}"

"""The declared HDF5 results schema (src/io/results_schema.tsv; docs/DESIGN.md, "HDF5 results") on the
Python side: its parser, and the read check of analysis.results.

The C++ writers read the same file (src/io/results_schema.hpp): with SINKLAB_SCHEMA_CHECK=<schema file> every
write of a binary is checked against it, and analysis.results.open_results checks every read (watch_reads): a
group, dataset or attribute that results.py looks up (`name in g`, `g[name]`, `g.get(name)`, `g.attrs[...]`)
in a file a sinklab binary wrote (root attribute sinklab_version) must be declared, else SchemaError names the
file and the object. Unset, nothing here is imported and reading costs nothing more.
"""
import re
import weakref
from dataclasses import dataclass
from pathlib import Path

import h5py

REPO_ROOT = Path(__file__).resolve().parents[1]
SCHEMA_PATH = REPO_ROOT / "src" / "io" / "results_schema.tsv"
KINDS = ("group", "attr", "column", "series", "array")
DATASET_KINDS = ("column", "series", "array")


class SchemaError(Exception):
    """An undeclared read (or a malformed schema line); str() names the file and the object. Not an OSError,
    KeyError or ValueError, so results.py's own handling of malformed files never swallows it."""


@dataclass(frozen=True)
class Item:
    kind: str
    path: tuple          # components; "{name}" matches any one
    attr: str            # attr lines: the attribute's name, else ""
    dtype: str
    dims: tuple          # () for '-'; symbols as str, numbers as int
    writers: tuple       # source files, or ("none",) for a read-only fallback
    reader: str
    line: int

    @property
    def text_path(self):
        return "/" + "/".join(self.path) + (f"@{self.attr}" if self.kind == "attr" else "")


def _components(path):
    return tuple(c for c in path.split("/") if c)


def _matches(pattern, path):
    return len(pattern) == len(path) and all(
        (p.startswith("{") and p.endswith("}")) or p == c for p, c in zip(pattern, path))


def parse(text, source="results_schema.tsv"):
    """The items of the schema's text, in order (the same grammar as ResultsSchema::parse)."""
    items = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split(None, 5)
        if len(fields) != 6:
            raise SchemaError(f"{source}:{no}: needs kind, path, dtype, shape, writer and reader")
        kind, path, dtype, shape, writer, reader = fields
        if kind not in KINDS:
            raise SchemaError(f"{source}:{no}: unknown kind {kind!r}")
        attr = ""
        if kind == "attr":
            path, _, attr = path.rpartition("@")
            if not attr:
                raise SchemaError(f"{source}:{no}: attr path without @<name>")
        if shape == "-":
            dims = ()
        elif re.fullmatch(r"\[[^\[\],]+(,[^\[\],]+)*\]", shape):
            dims = tuple(int(d) if d.isdigit() else d for d in shape[1:-1].split(","))
        else:
            raise SchemaError(f"{source}:{no}: shape {shape!r} is not [d,...] or -")
        items.append(Item(kind, _components(path), attr, dtype, dims, tuple(writer.split(",")), reader.strip(), no))
    return items


class Schema:
    def __init__(self, items, source):
        self.items = items
        self.source = source

    def find(self, obj, attr=None):
        """The items declaring object path `obj` (a group or dataset), or its attribute `attr`."""
        path = _components(obj)
        if attr is None:
            return [it for it in self.items if it.kind != "attr" and _matches(it.path, path)]
        return [it for it in self.items if it.kind == "attr" and it.attr == attr and _matches(it.path, path)]

    def check_read(self, filename, obj, attr=None):
        if not self.find(obj, attr):
            what = obj if attr is None else f"{obj}@{attr}"
            raise SchemaError(f"{filename}: undeclared read: {what} (not in the results schema {self.source})")


_schemas = {}


def load(path=SCHEMA_PATH):
    """The schema of file `path` (read once per path and modification time)."""
    p = Path(path)
    key = (str(p), p.stat().st_mtime_ns)
    if key not in _schemas:
        _schemas[key] = Schema(parse(p.read_text(), str(p)), str(p))
    return _schemas[key]


# ---- the read check -------------------------------------------------------------------------------------
_watched = {}  # file name -> (weakref to the h5py.File, Schema)


def _schema_of(filename):
    entry = _watched.get(filename)
    if entry is None:
        return None
    f = entry[0]()
    if f is None or not f.id.valid:  # closed: its reads are over
        del _watched[filename]
        return None
    return entry[1]


def _join(base, name):
    return name if name.startswith("/") else (base.rstrip("/") + "/" + name)


def _install():
    if getattr(h5py.Group, "_sinklab_schema_hooks", False):
        return

    def check_object(group, name):
        if isinstance(name, (str, bytes)) and _watched:
            name = name.decode() if isinstance(name, bytes) else name
            schema = _schema_of(group.file.filename)
            if schema is not None:
                schema.check_read(group.file.filename, _join(group.name, name))

    def check_attr(attrs, name):
        if isinstance(name, (str, bytes)) and _watched:
            filename = h5py.h5f.get_name(attrs._id).decode()
            schema = _schema_of(filename)
            if schema is not None:
                name = name.decode() if isinstance(name, bytes) else name
                schema.check_read(filename, h5py.h5i.get_name(attrs._id).decode(), name)

    def hooked(original, check):
        def lookup(self, name):
            check(self, name)
            return original(self, name)
        return lookup

    for cls, check in ((h5py.Group, check_object), (h5py.AttributeManager, check_attr)):
        cls.__getitem__ = hooked(cls.__getitem__, check)
        cls.__contains__ = hooked(cls.__contains__, check)
    h5py.Group._sinklab_schema_hooks = True


def watch_reads(f, schema_path):
    """Checks every later read of the open h5py.File `f` against the schema at `schema_path` (until f is
    closed), when a sinklab binary wrote it (root attribute sinklab_version): data_prep's inputs and empty files,
    which results.py reads only to say what they are, are left alone."""
    if "sinklab_version" not in f.attrs:
        return
    _install()
    _watched[f.filename] = (weakref.ref(f), load(schema_path))

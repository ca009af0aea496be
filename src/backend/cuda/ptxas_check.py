#!/usr/bin/env python3
"""The CUDA build's gate on local memory: no kernel of src/ may have a stack frame or spill registers.

Why: a kernel whose thread copies its arguments (TensorRows, indexed at run time) to local memory moves
100-560 bytes through the cache hierarchy per element it touches, against the 6-20 bytes of data it
reads and writes (issue #53, point 1). ptxas reports each kernel's frame, spills, registers and shared
memory with -v; this script reads that report where nvcc runs, so a kernel with local memory fails the
build that compiled it, naming the kernel and the architecture.

  ptxas_check.py --allow FILE --report-dir DIR -- COMMAND...
      CMake's CUDA compiler launcher (before ccache, which replays the compiler's stderr on a hit, so the
      report comes back with a cached object): runs COMMAND (nvcc ... -Xptxas -v ...), prints its output
      without the ptxas info lines, writes DIR/<object>.json, and fails (removing the object, so the next
      build compiles it again) when a kernel has a stack frame or spills and no entry of FILE names it.
  ptxas_check.py --merge DIR --allow FILE --out FILE.json
      One report of every kernel, the per-object reports put together (the build's ptxas_report.json,
      which the step ledger reads); fails on an allow-list entry that matches no kernel (a stale reason).
  ptxas_check.py --parse [--allow FILE] < ptxas-output
      The report of one compiler output as JSON on stdout (tests).

The allow-list: one entry a line, `<glob over the demangled kernel name> | <reason>`; '#' starts a comment.
A kernel that truly needs a stack (a callee's frame it cannot avoid) is named there with the reason.
"""
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys

ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)' for '(sm_\w+)'")
PROPS = re.compile(r"ptxas info\s*: Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"ptxas info\s*: Used (\d+) registers")
STACK = re.compile(r"(\d+) bytes cumulative stack size")
SMEM = re.compile(r"(\d+) bytes smem")


def parse(text):
    """The kernels of one ptxas -v output: mangled name, arch, registers, stack (the cumulative frame, callees
    included), spill stores and loads, static shared memory."""
    kernels, current, props_of = [], None, None
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m:
            current = dict(mangled=m.group(1), arch=m.group(2), registers=0, stack=0, spill_stores=0,
                           spill_loads=0, smem=0)
            kernels.append(current)
            props_of = None
            continue
        m = PROPS.search(line)
        if m:
            props_of = m.group(1)
            continue
        m = FRAME.search(line)
        if m and current is not None and props_of == current['mangled']:
            current['stack'] = max(current['stack'], int(m.group(1)))
            current['spill_stores'] = int(m.group(2))
            current['spill_loads'] = int(m.group(3))
            continue
        m = USED.search(line)
        if m and current is not None:
            current['registers'] = int(m.group(1))
            s = STACK.search(line)
            if s:
                current['stack'] = max(current['stack'], int(s.group(1)))
            s = SMEM.search(line)
            if s:
                current['smem'] = int(s.group(1))
    return kernels


def demangle(names):
    """Demangled names, in order (cu++filt or c++filt; the mangled names when neither is there)."""
    if not names:
        return []
    tool = shutil.which('cu++filt') or (os.path.exists('/usr/local/cuda/bin/cu++filt') and
                                        '/usr/local/cuda/bin/cu++filt') or shutil.which('c++filt')
    if not tool:
        return list(names)
    out = subprocess.run([tool], input='\n'.join(names) + '\n', capture_output=True, text=True).stdout.splitlines()
    return out if len(out) == len(names) else list(names)


def read_allow(path):
    entries = []
    if not path:
        return entries
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.split('#', 1)[0].strip()
            if not line:
                continue
            if '|' not in line:
                sys.exit('%s:%d: an entry is "<kernel glob> | <reason>"' % (path, number))
            pattern, reason = (p.strip() for p in line.split('|', 1))
            if not pattern or not reason:
                sys.exit('%s:%d: an entry needs both a kernel glob and a reason' % (path, number))
            entries.append((pattern, reason))
    return entries


def short_name(demangled):
    """The demangled name without its parameter list: what allow-list globs match."""
    depth = 0
    for i, ch in enumerate(demangled):
        if ch == '<':
            depth += 1
        elif ch == '>':
            depth -= 1
        elif ch == '(' and depth == 0 and not demangled.startswith('(anonymous', i):
            return demangled[:i]
    return demangled


def annotate(kernels, allow):
    """Adds the demangled name and, for a kernel with local memory, the allow-list reason (or None)."""
    for k, name in zip(kernels, demangle([k['mangled'] for k in kernels])):
        k['kernel'] = short_name(name)
        k['local_memory'] = k['stack'] > 0 or k['spill_stores'] > 0 or k['spill_loads'] > 0
    return judge(kernels, allow)


def judge(kernels, allow):
    """Sets each kernel's 'allowed': for one with local memory, the reason of the first allow-list entry whose
    glob matches its name (None when none does)."""
    for k in kernels:
        k['allowed'] = None
        if k['local_memory']:
            k['allowed'] = next((r for p, r in allow if fnmatch.fnmatchcase(k['kernel'], p)), None)
    return kernels


def violations(kernels):
    return [k for k in kernels if k['local_memory'] and not k['allowed']]


def describe(k):
    return '%s (%s): %d-byte stack frame, %d/%d bytes spill stores/loads, %d registers' % (
        k['kernel'], k['arch'], k['stack'], k['spill_stores'], k['spill_loads'], k['registers'])


def object_of(command):
    for i, a in enumerate(command):
        if a == '-o' and i + 1 < len(command):
            return command[i + 1]
        if a.startswith('-o') and len(a) > 2 and not a.startswith('-opt'):
            return a[2:]
    return None


def source_of(command):
    for a in reversed(command):
        if a.endswith('.cu'):
            return a
    return None


def launcher(allow_path, report_dir, command):
    proc = subprocess.run(command, capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    kept = [l for l in text.splitlines()
            if not (l.startswith('ptxas info') or FRAME.search(l))]
    if kept:
        sys.stderr.write('\n'.join(kept) + '\n')
    if proc.returncode != 0:
        return proc.returncode
    kernels = parse(text)
    if not kernels:  # not a device compile (e.g. a dependency scan): nothing to check
        return 0
    kernels = annotate(kernels, read_allow(allow_path))
    obj, src = object_of(command), source_of(command)
    for k in kernels:
        k['source'] = os.path.relpath(src) if src else None
    os.makedirs(report_dir, exist_ok=True)
    name = re.sub(r'[^\w.-]', '_', obj or src or 'unknown')
    with open(os.path.join(report_dir, name + '.json'), 'w') as f:
        json.dump(kernels, f, indent=1)
    bad = violations(kernels)
    if not bad:
        return 0
    for k in bad:
        sys.stderr.write('%s: error: kernel %s uses local memory; remove it (docs/DESIGN.md "Local memory: the ptxas gate") or '
                         'name the kernel and the reason in %s\n' % (src, describe(k), allow_path))
    if obj and os.path.exists(obj):
        os.remove(obj)  # so that the next build compiles it again instead of taking it as up to date
    return 1


def merge(report_dir, allow_path, out_path):
    kernels = []
    for name in sorted(os.listdir(report_dir)):
        if name.endswith('.json'):
            with open(os.path.join(report_dir, name)) as f:
                kernels += json.load(f)
    kernels.sort(key=lambda k: (k.get('source') or '', k['kernel'], k['arch']))
    allow = read_allow(allow_path)
    judge(kernels, allow)  # against the allow-list as it is now (an object compiled earlier kept the old verdict)
    stale = [p for p, _ in allow if not any(k['allowed'] is not None and fnmatch.fnmatchcase(k['kernel'], p)
                                            for k in kernels)]
    report = dict(kernels=[{key: k[key] for key in ('kernel', 'arch', 'registers', 'stack', 'spill_stores',
                                                    'spill_loads', 'smem', 'source', 'allowed', 'mangled')}
                           for k in kernels])
    tmp = out_path + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, out_path)
    for k in violations(kernels):
        sys.stderr.write('%s: error: kernel %s uses local memory and %s does not name it\n' %
                         (k.get('source'), describe(k), allow_path))
    if stale:
        sys.stderr.write('%s: error: allow-list entries that match no kernel with local memory: %s\n' %
                         (allow_path, ', '.join(stale)))
    return 1 if stale or violations(kernels) else 0


def main(argv):
    args = argv[1:]
    if args[:1] == ['--parse']:
        allow = args[args.index('--allow') + 1] if '--allow' in args else None
        json.dump(annotate(parse(sys.stdin.read()), read_allow(allow)), sys.stdout, indent=1)
        return 0
    opts = {}
    while args and args[0] != '--':
        if len(args) < 2:
            sys.exit(__doc__)
        opts[args[0]] = args[1]
        args = args[2:]
    if '--merge' in opts:
        return merge(opts['--merge'], opts.get('--allow'), opts['--out'])
    if args[:1] != ['--'] or len(args) < 2 or '--report-dir' not in opts:
        sys.exit(__doc__)
    return launcher(opts.get('--allow'), opts['--report-dir'], args[1:])


if __name__ == '__main__':
    sys.exit(main(sys.argv))

"""What test_design_doc.py reads out of sinklab's C++ sources: their comments, and the length of every
function they define.

A small scanner, not a parser: it is written for this code base (clang-format style, no K&R braces, no
macros that open a body) and a test keeps it honest by the functions it must find (see
test_design_doc.py, test_function_scanner_sees_the_code).
"""
import re

# A comment, a string or character literal (raw strings included), or a preprocessor line with its
# continuations; everything else is code.
_LEXEME = re.compile(
    r'(?P<line>//[^\n]*)'
    r'|(?P<block>/\*.*?\*/)'
    r'|(?P<raw>R"(?P<delim>[^(\s]*)\(.*?\)(?P=delim)")'
    r'|(?P<str>"(?:\\.|[^"\\\n])*")'
    r"|(?P<chr>'(?:\\.|[^'\\\n])+')"
    r'|(?P<pp>^[ \t]*#(?:\\\n|[^\n])*)',
    re.S | re.M)


def _blank(text):
    """text with every character but newlines turned into spaces, so offsets and line numbers hold."""
    return "\n".join(" " * len(line) for line in text.split("\n"))


def split_source(text):
    """(code, comments): two copies of text of the same length, one with comments, literals and
    preprocessor lines blanked, the other with only the comments kept."""
    code, comments, last = [], [], 0
    for m in _LEXEME.finditer(text):
        between = text[last:m.start()]
        code.append(between)
        comments.append(_blank(between))
        kind = m.lastgroup if m.lastgroup != "delim" else "raw"
        code.append(_blank(m.group()))
        comments.append(m.group() if kind in ("line", "block") else _blank(m.group()))
        last = m.end()
    code.append(text[last:])
    comments.append(_blank(text[last:]))
    return "".join(code), "".join(comments)


def comments_of(text):
    """The comments of a C++ source, in place (other characters blanked)."""
    return split_source(text)[1]


# Words that make a brace at namespace or class scope something other than a function body.
_SCOPE = re.compile(r"^(?:template\s*<.*>\s*)?(?:typedef\s+)?(?:class|struct|union)\b", re.S)
_ENUM = re.compile(r"^(?:template\s*<.*>\s*)?(?:typedef\s+)?enum\b", re.S)
_NAMESPACE = re.compile(r"\b(?:namespace|extern)\b")
# What may stand before a declaration without ending it: access specifiers, and an X-macro's use such as
# `SINKLAB_OPS(SINKLAB_OP_OVERRIDE, SINKLAB_OP_OVERRIDE)` (no semicolon after it).
_PREFIX = re.compile(r"^\s*(?:(?:public|private|protected)\s*:(?!:)\s*|[A-Z][A-Z0-9_]*\s*\([^()]*\)\s*(?=\S))*")
_OPERATOR = re.compile(r"\boperator\s*(?:\(\)|\[\]|[^\w\s(]+|\w[\w:<>]*)")
_NOT_A_NAME = {"decltype", "alignas", "__attribute__", "__declspec", "__launch_bounds__", "noexcept", "sizeof"}
_CLASS_NAME = re.compile(r"\b(?:class|struct|union)\s+(?:alignas\s*\([^)]*\)\s*)?(\w+)")


def _matching(code, i, open_c, close_c):
    """The offset of the bracket that closes the one at code[i]."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_c:
            depth += 1
        elif code[j] == close_c:
            depth -= 1
            if depth == 0:
                return j
    raise ValueError(f"unbalanced {open_c} at offset {i}")


def _parameters(head):
    """(name, its offset, offset after the parameter list) of a declaration head, or None when it declares no
    function: the name is the (qualified) identifier before the first parenthesis outside template
    brackets."""
    masked = _OPERATOR.sub(lambda m: "o" * len(m.group()), head)  # operator() and operator< hide no list
    angle, skip_to = 0, -1
    for i, c in enumerate(masked):
        if i <= skip_to:
            continue
        if c == "<":
            angle += 1
        elif c == ">":
            angle = max(angle - 1, 0)
        elif c == "(" and angle == 0:
            m = re.search(r"(~?[A-Za-z_][\w:~]*)\s*(?:<[^<>()]*>\s*)?$", masked[:i])  # f or f<float>
            if not m:
                return None
            if m.group(1) in _NOT_A_NAME:
                skip_to = _matching(masked, i, "(", ")")
                continue
            name = head[m.start(1):m.end(1)]
            return name, m.start(1), _matching(head, i, "(", ")") + 1
        elif c == "=" and angle == 0:
            return None
    return None


def functions(text):
    """[(qualified name, first line, last line)] of every function defined at namespace or class scope
    of a C++ source: the lines from the one that holds its name (a template<> line above it does not
    count) to the closing brace. Lambdas, local classes and the bodies of control statements are part of the function they are
    in; a member defined inside its class is named Class::member."""
    code = split_source(text)[0]
    found = []
    _scan_scope(code, _brace_pairs(code), 0, len(code), [], found)
    return [(name, code.count("\n", 0, start) + 1, code.count("\n", 0, end) + 1) for name, start, end in found]


def _brace_pairs(code):
    """{offset of a '{': offset of the '}' that closes it}."""
    pairs, stack = {}, []
    for m in re.finditer(r"[{}]", code):
        if m.group() == "{":
            stack.append(m.start())
        else:
            if not stack:
                raise ValueError(f"unbalanced }} at offset {m.start()}")
            pairs[stack.pop()] = m.start()
    if stack:
        raise ValueError(f"unbalanced {{ at offset {stack[-1]}")
    return pairs


_BOUNDARY = re.compile(r"[;{}]")


def _scan_scope(code, pairs, begin, end, classes, found):
    """Scans code[begin:end], a namespace or class body, appending (name, head offset, end offset)."""
    head_start, i = begin, begin
    while (m := _BOUNDARY.search(code, i, end)) is not None:
        i, c = m.start(), m.group()
        if c in ";}":
            head_start = i + 1
        elif c == "{":
            close = pairs[i]
            raw = code[head_start:i]
            skipped = _PREFIX.match(raw).end()
            lead = skipped + len(raw[skipped:]) - len(raw[skipped:].lstrip())
            head = raw[lead:].strip()
            balanced = head.count("(") == head.count(")")
            params = _parameters(head) if balanced else None
            if not balanced:
                pass  # a default argument such as `Tensor x = Tensor{}` inside a parameter list
            elif _NAMESPACE.search(head) and not params:
                _scan_scope(code, pairs, i + 1, close, classes, found)
                head_start = close + 1
            elif _ENUM.match(head):
                pass  # its braces are skipped; the head runs on to the ';'
            elif _SCOPE.match(head) and not params:
                name = _CLASS_NAME.search(head).group(1)
                _scan_scope(code, pairs, i + 1, close, classes + [name], found)
            elif params:
                name, at, after = params
                rest = head[after:]
                in_init_list = re.match(r"\s*(?:noexcept\s*)?:(?!:)", rest) and re.search(r"[\w>]\s*$", head)
                if not in_init_list:
                    qualified = "::".join(classes + [name]) if classes and "::" not in name else name
                    found.append((qualified, head_start + lead + at, close))
                    head_start = close + 1
            # anything else (an initialiser such as `= {...}` or `x_{0}`) is skipped with its braces
            i = close
        i += 1

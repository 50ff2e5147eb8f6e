#!/usr/bin/env python3
"""unchevron.py IN.cu OUT.cpp — rewrites every CUDA launch `kernel<T><<<grid, block, shmem, stream>>>(args)` of a
kernel file as `tfb_emu_launch("kernel", [&] { kernel<T>(args); }, grid, block, shmem, stream)`, the form
tests/emu/cuda_emu.h runs on the CPU. Everything else, line breaks included, is kept (a #line directive makes the
compiler's messages name the original file and lines). The code after the last #include (or after a line
`/* unchevron: namespace below */`, which keeps a type that cuda_internal.h declares global) goes into namespace
tfb_emu_kernels, so its functions cannot clash with those of nvcc's object of the same file when a CUDA build links
both; the file's external tfb_* functions returning void, int or tfb_status (the installers, the convolution plans'
release, the communicator's entry points) are forwarded from the global namespace. Fails on a launch it cannot parse
rather than guess."""
import re
import sys


def fail(src, pos, why):
    line = src.count("\n", 0, pos) + 1
    sys.exit(f"unchevron: {sys.argv[1]}:{line}: {why}")


def kernel_start(src, end):
    """Start of the kernel expression that ends just before `end`: an identifier and optional <template args>."""
    i = end
    if src[i - 1] == ">":
        depth = 0
        while i > 0:
            i -= 1
            depth += {">": 1, "<": -1}.get(src[i], 0)
            if depth == 0:
                break
    while i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_"):
        i -= 1
    if i == end or not (src[i].isalpha() or src[i] == "_"):
        fail(src, end, "no kernel name before <<<")
    return i


def closing_paren(src, open_at):
    depth = 0
    for i in range(open_at, len(src)):
        depth += {"(": 1, ")": -1}.get(src[i], 0)
        if depth == 0:
            return i
    fail(src, open_at, "unbalanced parentheses in a launch")


def rewrite(src):
    out, pos = [], 0
    while True:
        at = src.find("<<<", pos)
        if at < 0:
            out.append(src[pos:])
            return "".join(out)
        start = kernel_start(src, at)
        cfg_end = src.find(">>>", at)
        if cfg_end < 0:
            fail(src, at, "<<< without >>>")
        open_at = cfg_end + 3
        while src[open_at].isspace():
            open_at += 1
        if src[open_at] != "(":
            fail(src, at, "no argument list after >>>")
        close = closing_paren(src, open_at)
        kernel, cfg = src[start:at], src[at + 3:cfg_end]
        name = kernel.split("<")[0]
        out.append(src[pos:start])
        out.append(f'tfb_emu_launch("{name}", [&] {{ {kernel}{src[open_at:close + 1]}; }}, {cfg})')
        pos = close + 1


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: unchevron.py IN.cu OUT.cpp")
    src = rewrite(open(sys.argv[1]).read())
    includes = list(re.finditer(r"^#include .*$|^/\* unchevron: namespace below \*/$", src, re.M))
    if not includes:
        sys.exit(f"unchevron: {sys.argv[1]}: no #include to open the namespace after")
    at = includes[-1].end()
    line = src.count("\n", 0, at) + 2
    text = (f'#line 1 "{sys.argv[1]}"\n' + src[:at] + f'\nnamespace tfb_emu_kernels {{\n#line {line} "{sys.argv[1]}"' +
            src[at:] + "\n}\n")
    for ret, name, params in re.findall(r"^(void|int|tfb_status) (tfb_\w+)\(([^)]*)\) \{", src, re.M):
        args = ", ".join(re.findall(r"(\w+)\s*(?:,|$)", params)) if params.strip() != "void" else ""
        call = f"tfb_emu_kernels::{name}({args})"
        text += f"{ret} {name}({params}) {{ {'return ' if ret != 'void' else ''}{call}; }}\n"
    with open(sys.argv[2], "w") as f:
        f.write(text)


main()

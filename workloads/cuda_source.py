"""CUDA C source kept in a Python file, compiled so that its line information points at that file.

PyCUDA (nvcc) and CuPy (NVRTC) compile a source string as a file of their own (``kernel.cu`` in a
temporary folder PyCUDA deletes, ``kern.cu`` for NVRTC, which never writes one): the line
information of ``-lineinfo`` names a file that does not exist when Nsight Compute imports the
sources, so its Source page has line numbers but no text. A ``#line N "<path>"`` directive in
front of the string tells the compiler that the next line is line N of the Python file holding
the string, so the line table names a file that exists, at the line where the CUDA text really is,
and ``ncu --import-source yes`` puts that text into the report (Warp does the same for its
generated code). Rejected alternative: PyCUDA's ``keep=True`` with a ``cache_dir`` passed to
``ncu --source-folders``: it keeps a copy of the text in a folder per run, needs a folder and a
flag per framework, and does nothing for NVRTC.

Without ``-lineinfo`` a ``#line`` directive changes nothing in the compiled code (no line table is
emitted), so the timed kernels are compiled from the same text as the profiled ones;
``tests/test_cuda_source.py`` compares the PTX and the SASS both ways.

Nothing here imports a GPU package.
"""
from __future__ import annotations

import os

from workloads import settings
from workloads.contract import WorkloadError

#: the compile option that adds the line table (nvcc and NVRTC spell it the same)
LINEINFO_OPTION = "-lineinfo"


class CudaSourceError(WorkloadError):
    """The CUDA text is not where its ``#line`` directive would say it is."""


def lineinfo_requested() -> bool:
    """Whether kernels are to be compiled with line information (``COOKBOOK_LINEINFO=1``: the
    kernel-page run; every other run compiles without)."""
    return settings.flag("COOKBOOK_LINEINFO")


def lineinfo_options() -> tuple[str, ...]:
    """``("-lineinfo",)`` when line information is requested, else ``()``."""
    return (LINEINFO_OPTION,) if lineinfo_requested() else ()


def source_line(text: str, module_file: str | os.PathLike) -> int:
    """The line of ``module_file`` on which ``text`` starts. The text must appear in the file exactly
    once, character for character: a raw string literal without escapes or line continuations."""
    path = os.path.abspath(module_file)
    try:
        with open(path, encoding="utf-8") as f:
            content = f.read()
    except OSError as e:
        raise CudaSourceError(f"{path}: cannot read the file that holds the CUDA source ({e.strerror})") from None
    count = content.count(text)
    if count != 1:
        how = "not found" if count == 0 else f"found {count} times"
        raise CudaSourceError(f"{path}: the CUDA source string is {how} in the file's text (it must be a raw "
                              "string literal written once, without escapes, for #line to point at it)")
    return content.count("\n", 0, content.index(text)) + 1


def _c_string(path: str) -> str:
    if "\n" in path or "\r" in path:
        raise CudaSourceError(f"{path!r}: a path with a line break cannot go into a #line directive")
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def with_line_directive(text: str, module_file: str | os.PathLike) -> str:
    """``text`` preceded by ``#line N "<absolute path of module_file>"``, N the line of the file on
    which ``text`` starts: line k of ``text`` is then line N + k - 1 of the Python file, for the
    compiler's line table and so for Nsight Compute."""
    line = source_line(text, module_file)
    return f"#line {line} {_c_string(os.path.abspath(module_file))}\n{text}"

"""CUDA text kept in Python files (workloads/cuda_source.py): the ``#line`` directive points at the file
and line where the text really is, ``-lineinfo`` comes only when asked for, and, compiled by the CUDA
toolkit's nvcc for an H100/H200 (sm_90; no GPU needed to compile), the line table names the Python
file at each kernel's own lines while the instructions stay byte for byte those compiled without line
information or without the directive. CuPy compiles with NVRTC on the GPU host; nvcc reads the same
directive with the same front end. The CuPy kernel's index arithmetic (pairs, odd tail, grid-stride
loop) is also run on the CPU through g++ against the float64 reference."""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from workloads import cuda_source
from workloads.cuda_source import CudaSourceError, lineinfo_options, source_line, with_line_directive
from workloads.cupy_sqdiff import raw_kernel
from workloads.pycuda_kernel import kernels

ARCH = "sm_90"  # H100 and H200
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no CUDA toolkit (nvcc) here")

#: (module, its CUDA text, the kernels in it); PyCUDA wraps its text in extern "C" (no_extern_c=False)
SOURCES = {
    "pycuda": (kernels, kernels.SOURCE, ("scale_one_block", "scale_grid_stride", "scale_vec4")),
    "cupy": (raw_kernel, raw_kernel.SOURCE, (raw_kernel.KERNEL_NAME,)),
}


def _compiled_text(which: str, directive: bool = True) -> str:
    module, text, _ = SOURCES[which]
    body = with_line_directive(text, module.__file__) if directive else text
    # as pycuda.compiler.compile does with no_extern_c=False; CuPy's source declares extern "C" itself
    return f'extern "C" {{\n{body}\n}}\n' if which == "pycuda" else body


def _kernel_lines(path: str, name: str) -> tuple[int, int]:
    """First and last line of kernel ``name`` in the file: its signature to its closing brace."""
    lines = Path(path).read_text().splitlines()
    start = next(i for i, t in enumerate(lines, 1) if re.search(rf"\bvoid {name}\(", t))
    end = next(i for i, t in enumerate(lines, 1) if i > start and t == "}")
    return start, end


# --- the directive ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", SOURCES)
def test_each_line_after_the_directive_is_that_line_of_the_python_file(which):
    module, text, _ = SOURCES[which]
    compiled = with_line_directive(text, module.__file__).splitlines()
    m = re.fullmatch(r'#line (\d+) "(.+)"', compiled[0])
    assert m, compiled[0]
    first, path = int(m.group(1)), m.group(2)
    assert path == os.path.abspath(module.__file__) and os.path.isabs(path)
    file_lines = Path(path).read_text().splitlines()
    body = compiled[1:]
    assert body == text.splitlines() and len(body) > 20
    # line k of the text (k = 0 is the rest of the line with the opening quotes) is line first + k
    for k, line in enumerate(body):
        if k == 0:
            assert file_lines[first - 1].endswith('r"""' + line)
        else:
            assert file_lines[first - 1 + k] == line, (k, line)


def test_the_kernels_own_lines_are_where_the_file_has_them():
    path = kernels.__file__
    first = source_line(kernels.SOURCE, path)
    text_lines = kernels.SOURCE.splitlines()
    k = next(i for i, t in enumerate(text_lines) if t.strip() == "float4 v = in4[i];")
    assert Path(path).read_text().splitlines()[first + k - 1].strip() == "float4 v = in4[i];"


def test_text_not_in_the_file_once_is_a_typed_error_naming_the_file(tmp_path):
    holder = tmp_path / "holder.py"
    holder.write_text('A = r"""\n__global__ void k() {}\n"""\nB = r"""\n__global__ void k() {}\n"""\n')
    with pytest.raises(CudaSourceError, match=rf"{re.escape(str(holder))}: .* found 2 times"):
        with_line_directive("\n__global__ void k() {}\n", holder)
    with pytest.raises(CudaSourceError, match=rf"{re.escape(str(holder))}: .* not found"):
        with_line_directive("__global__ void other() {}", holder)
    # an escaped string is not the file's text: #line could not point at it
    holder.write_text('A = "\\n__global__ void k() {}\\n"\n')
    with pytest.raises(CudaSourceError, match="raw string"):
        with_line_directive("\n__global__ void k() {}\n", holder)
    with pytest.raises(CudaSourceError, match="cannot read"):
        with_line_directive("x", tmp_path / "missing.py")


def test_quotes_and_backslashes_in_the_path_are_escaped(tmp_path):
    odd = tmp_path / 'a "b" \\ c'
    odd.mkdir()
    holder = odd / "k.py"
    holder.write_text('S = r"""__global__ void k() {}"""\n')
    first = with_line_directive("__global__ void k() {}", holder).splitlines()[0]
    assert first == '#line 1 "' + str(holder).replace("\\", "\\\\").replace('"', '\\"') + '"'


def test_lineinfo_only_when_asked(monkeypatch):
    monkeypatch.delenv("COOKBOOK_LINEINFO", raising=False)
    assert lineinfo_options() == ()
    monkeypatch.setenv("COOKBOOK_LINEINFO", "0")
    assert lineinfo_options() == ()
    monkeypatch.setenv("COOKBOOK_LINEINFO", "1")
    assert lineinfo_options() == ("-lineinfo",) and cuda_source.lineinfo_requested()


# --- compiled by nvcc ------------------------------------------------------------------------------------


def _nvcc(tmp_path: Path, text: str, out: str, *options: str) -> Path:
    src = tmp_path / "kernel.cu"
    src.write_text(text)
    target = tmp_path / out
    kind = "-ptx" if out.endswith(".ptx") else "-cubin"
    r = subprocess.run([NVCC, kind, f"-arch={ARCH}", *options, str(src), "-o", str(target)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return target


def _elf_sections(path: Path) -> dict[str, bytes]:
    """Section name -> bytes of an ELF64 little-endian file (a cubin)."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    out = {}
    for name, _type, _flags, _addr, offset, size in headers:
        start = names_at + name
        out[data[start:data.index(b"\0", start)].decode()] = data[offset:offset + size]
    return out


def _ptx_locs(ptx: str) -> dict[str, list[int]]:
    """Kernel name -> the source lines of its ``.loc`` directives (file 1, the only file)."""
    out: dict[str, list[int]] = {}
    for m in re.finditer(r"\.entry (\w+)\((.*?)^}", ptx, re.S | re.M):
        out[m.group(1)] = [int(x) for x in re.findall(r"^\s*\.loc\s+1 (\d+) \d+", m.group(2), re.M)]
    return out


@needs_nvcc
@pytest.mark.parametrize("which", SOURCES)
def test_the_line_table_names_the_python_file_at_each_kernels_own_lines(which, tmp_path):
    module, _, names = SOURCES[which]
    ptx = _nvcc(tmp_path, _compiled_text(which), "k.ptx", "-lineinfo").read_text()
    files = re.findall(r'^\s*\.file\s+(\d+) "(.+?)"', ptx, re.M)
    assert files == [("1", os.path.abspath(module.__file__))]
    locs = _ptx_locs(ptx)
    assert set(locs) == set(names)
    for name in names:
        start, end = _kernel_lines(module.__file__, name)
        assert locs[name] and all(start <= line <= end for line in locs[name]), (name, start, end, locs[name])
    file_lines = Path(module.__file__).read_text().splitlines()
    located = {file_lines[line - 1].strip() for lines in locs.values() for line in lines}
    # the memory statements are among the lines instructions are attributed to
    expected = ({"float4 v = in4[i];", "out4[i] = v;", "out[i] = 2.0f * in[i];"} if which == "pycuda"
                else {"const double2 x = a2[i];", "out2[i] = d;"})
    assert expected <= located, located


@needs_nvcc
@pytest.mark.parametrize("which", SOURCES)
def test_the_directive_and_lineinfo_change_no_instruction(which, tmp_path):
    _, _, names = SOURCES[which]
    plain = _nvcc(tmp_path, _compiled_text(which, directive=False), "plain.ptx").read_text()
    directed = _nvcc(tmp_path, _compiled_text(which), "directed.ptx").read_text()
    # without -lineinfo no line table is written: the PTX is the same with or without the directive
    assert ".loc" not in directed and plain == directed
    with_lines = _nvcc(tmp_path, _compiled_text(which), "lines.ptx", "-lineinfo").read_text()
    strip = re.compile(r"^[ \t]*(\.loc|\.file)\b[^\n]*\n|^\s*\.section\s+\.debug.*?^\s*}\n", re.M | re.S)
    assert strip.sub("", with_lines) == strip.sub("", directed)
    # and the SASS of every kernel is byte for byte the same (what the timed runs execute)
    timed = _elf_sections(_nvcc(tmp_path, _compiled_text(which), "timed.cubin"))
    profiled = _elf_sections(_nvcc(tmp_path, _compiled_text(which), "profiled.cubin", "-lineinfo"))
    for name in names:
        assert timed[f".text.{name}"] and timed[f".text.{name}"] == profiled[f".text.{name}"], name
    assert ".debug_line" not in timed and ".debug_line" in profiled
    # DWARF keeps the folder and the file name apart
    folder, name = os.path.split(os.path.abspath(SOURCES[which][0].__file__))
    assert folder.encode() + b"\0" in profiled[".debug_line"] and name.encode() + b"\0" in profiled[".debug_line"]


# --- the CuPy kernel's arithmetic on the CPU ---------------------------------------------------------------

_CPU_SHIM = r"""
// just enough of CUDA for the kernel's text to compile as C++: each (block, thread) runs in turn
struct cookbook_dim3 { unsigned int x, y, z; };
static cookbook_dim3 blockIdx, blockDim, gridDim, threadIdx;
struct double2 { double x, y; };
#define __global__
"""

_CPU_LAUNCH = r"""
extern "C" void cookbook_launch(const double *a, const double *b, double *out, unsigned long long n,
                                unsigned int blocks, unsigned int threads)
{
    gridDim.x = blocks; blockDim.x = threads;
    for (unsigned int bx = 0; bx < blocks; ++bx) {
        for (unsigned int tx = 0; tx < threads; ++tx) {
            blockIdx.x = bx; threadIdx.x = tx;
            KERNEL(a, b, out, n);
        }
    }
}
"""


@pytest.fixture(scope="module")
def cpu_kernel(tmp_path_factory):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no C++ compiler (g++) here")
    folder = tmp_path_factory.mktemp("raw-kernel-cpu")
    src = folder / "k.cpp"
    src.write_text(_CPU_SHIM + with_line_directive(raw_kernel.SOURCE, raw_kernel.__file__)
                   + _CPU_LAUNCH.replace("KERNEL", raw_kernel.KERNEL_NAME))
    lib = folder / "k.so"
    # no contraction: a subtraction followed by a product gives none on the GPU either
    r = subprocess.run([gxx, "-O1", "-ffp-contract=off", "-shared", "-fPIC", str(src), "-o", str(lib)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    fn = ctypes.CDLL(str(lib)).cookbook_launch
    pointer = np.ctypeslib.ndpointer(np.float64, flags="C_CONTIGUOUS")
    fn.argtypes = [pointer, pointer, pointer, ctypes.c_ulonglong, ctypes.c_uint, ctypes.c_uint]
    fn.restype = None
    return fn


@pytest.mark.parametrize("n,blocks,threads", [(1, 1, 1), (2, 1, 32), (7, 2, 2), (1000, 3, 4), (1001, 3, 4),
                                              (4097, 1, 256), (65535, 8, 32)])
def test_the_raw_kernel_text_computes_every_element_once_as_the_float64_reference(cpu_kernel, n, blocks, threads):
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    out = np.full(n, np.nan)  # an element the kernel misses stays NaN
    cpu_kernel(a, b, out, n, blocks, threads)
    d = a - b
    # the same two float64 operations per element: equal bit for bit, whatever the grid
    assert np.array_equal(out, d * d)

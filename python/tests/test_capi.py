"""The ctypes structures against the C compiler's layout of include/estream.h (sizes and every
field's offset), and es_session_default_params() read through them."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import estream
from estream import _capi
from conftest import REPO

STRUCTS = {
    "es_session_params": _capi.SessionParams,
    "es_seq": _capi.Seq,
    "es_run_stats": _capi.RunStats,
    "es_ppl_result": _capi.PplResult,
}


def _c_layout(tmp: Path) -> dict[str, int]:
    """sizeof and offsetof of every field, as the C compiler lays them out."""
    header = REPO / "include" / "estream.h"
    cc = shutil.which(os.environ.get("CC", "cc"))
    if not header.is_file() or not cc:
        pytest.skip("needs include/estream.h and a C compiler")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "estream.h"',
             "int main(void) {"]
    for cname, st in STRUCTS.items():
        lines.append(f'printf("{cname} %zu\\n", sizeof({cname}));')
        for f, _ in st._fields_:
            lines.append(f'printf("{cname}.{f} %zu\\n", offsetof({cname}, {f}));')
    lines += ["return 0; }"]
    src, exe = tmp / "layout.c", tmp / "layout"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c11", "-I", str(header.parent), "-o", str(exe), str(src)],
                   check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


def test_struct_layout_matches_c(tmp_path: Path) -> None:
    c = _c_layout(tmp_path)
    for cname, st in STRUCTS.items():
        assert ctypes.sizeof(st) == c[cname], cname
        for f, _ in st._fields_:
            assert getattr(st, f).offset == c[f"{cname}.{f}"], f"{cname}.{f}"


def test_default_params() -> None:
    sp = _capi.load().es_session_default_params()
    assert 1 <= sp.n_threads <= _capi.ES_MAX_THREADS
    assert (sp.reference, sp.max_tokens, sp.stream, sp.mem_budget_bytes) == (0, 0, 0, 0)
    assert sp.max_seqs in (0, 64) and sp.plan_capacity == 16384
    assert (sp.groups, sp.banks, sp.queue_depth, sp.policy) == (0, 0, 0, 0)
    assert sp.io_limit_bytes_per_s == 0.0 and sp.io_backend == 0
    assert (sp.direct_io, sp.verify_checksums, sp.max_logits_rows) == (1, 1, 1)
    assert sp.reserve_bytes == 0 and sp.kernels is None and sp.trace_path is None
    assert sp.tune is None and not sp.abort_cb and not sp.progress_cb and sp.cb_user is None


def test_versions() -> None:
    assert estream.library_version().split(".")[0] == str(_capi.ABI_MAJOR)
    assert estream.kernels()
    header = REPO / "include" / "estream.h"
    if header.is_file() and estream.__version__ != "0+unknown":
        assert estream.__version__ == estream.library_version()

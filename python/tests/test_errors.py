"""Failures: the library's errors as estream.Error with its one-line message (the line the CLI
prints), bad records as RecordError with the CLI's message for them, bad arguments as
ValueError/TypeError, and where the library is looked for."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import estream
from conftest import REPO, cli, cli_jsonl


def _cli_error(*args: str) -> str:
    """The CLI's one-line error, without its "estream: " prefix."""
    p = cli(*args, check=False)
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("estream: "), p.stderr
    return lines[0][len("estream: "):]


def test_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "no-such-model.gguf")
    with pytest.raises(estream.Error) as e:
        estream.Model(path)
    assert e.value.status == estream.E_IO and isinstance(e.value, RuntimeError)
    assert str(e.value) == _cli_error("info", "-m", path)
    assert str(e.value) == f"{path}: cannot open: No such file or directory"
    assert "\n" not in str(e.value)
    with pytest.raises(estream.Error) as e2:  # a session given a path opens the model itself
        estream.Session(path)
    assert str(e2.value) == str(e.value)


@pytest.mark.parametrize("cut", [0, 3, 100, 1000, -1000])
def test_corrupt_file(tiny: Path, tmp_path: Path, cut: int) -> None:
    data = tiny.read_bytes()
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(data[:cut] if cut >= 0 else data[:len(data) + cut])
    with pytest.raises(estream.Error) as e:
        estream.Model(bad)
    assert e.value.status == estream.E_FORMAT
    assert str(e.value) == _cli_error("info", "-m", str(bad))
    assert str(e.value).startswith(str(bad) + ":") and "\n" not in str(e.value)


def test_impossible_budget(tiny: Path, tmp_path: Path) -> None:
    with pytest.raises(estream.Error) as e:
        estream.Session(tiny, mem="1M")
    assert e.value.status == estream.E_BUDGET
    msg = str(e.value)
    (tmp_path / "in.jsonl").write_text('{"text": "hello"}\n')
    want = _cli_error("score", "-m", str(tiny), "-f", str(tmp_path / "in.jsonl"), "--mem", "1M")
    assert want.startswith("score: ")
    # the same sentence; the sizes in it differ (the budget counts what each process holds)
    digits = re.compile(r"[0-9]+(\.[0-9]+)?")
    assert digits.sub("N", msg) == digits.sub("N", want[len("score: "):])
    assert msg.startswith("a memory budget of 1.0 MiB is too small") and "\n" not in msg


def test_errors_of_a_call(tiny: Path) -> None:
    with estream.Session(tiny) as s:
        with pytest.raises(estream.Error) as e:  # the library's check of a perplexity
            s.perplexity("too short", ctx=64)
        assert e.value.status == estream.E_INVAL and "needs at least 128" in str(e.value)
        with pytest.raises(estream.Error) as e:
            s.perplexity("x" * 4000, ctx=100000)
        assert "exceeds the model's context" in str(e.value)
        assert s.score(["still usable"])[0].ids.size > 0


def test_record_errors_equal_cli(tiny: Path, tmp_path: Path) -> None:
    """A record the CLI refuses: the same message, prefixed by where it is."""
    m = estream.Model(tiny)
    cases = [
        ({"text": ""}, lambda s: s.score([""])),
        ({"text": "x" * 600}, lambda s: s.score(["x" * 600])),  # longer than the context (512)
        ({"ids": []}, lambda s: s.score([[]])),
        ({"ids": [1, m.n_vocab]}, lambda s: s.score([[1, m.n_vocab]])),
        ({"context": "abc", "continuation": ""}, lambda s: s.loglikelihood([("abc", "")])),
        ({"context": "a", "choices": []}, lambda s: s.choose("a", [])),
        ({"context": "a", "choices": ["b"], "gold": 1}, lambda s: s.choose("a", ["b"], gold=1)),
        ({"text": "", "labels": ["a"]}, lambda s: s.classify("", ["a"])),
        ({"text": "a", "labels": []}, lambda s: s.classify("a", [])),
    ]
    want = cli_jsonl("score", tiny, [c for c, _ in cases], tmp_path, "--on-error", "skip")
    with estream.Session(m) as s:
        for (rec, call), w in zip(cases, want):
            with pytest.raises(estream.RecordError) as e:
                call(s)
            assert isinstance(e.value, ValueError)
            assert re.sub(r"^\w+\[0\]: ", "", str(e.value)) == w["error"], rec
        emb = cli_jsonl("embed", tiny, [{"text": ""}, {"ids": [-1]}], tmp_path, "--on-error",
                        "skip")
        for item, w in zip(["", [-1]], emb):
            with pytest.raises(estream.RecordError) as e:
                s.embed([item])
            assert str(e.value) == "texts[0]: " + w["error"]


def test_bad_arguments(tiny: Path) -> None:
    with pytest.raises(ValueError):
        estream.Session(tiny, threads=0)
    with pytest.raises(ValueError):
        estream.Session(tiny, mem="12 parsecs")
    with pytest.raises(ValueError):
        estream.Session(tiny, reference=True, mem="1G")
    with pytest.raises(ValueError):
        estream.Session(tiny, policy="sometimes")
    with estream.Session(tiny) as s:
        with pytest.raises(TypeError):
            s.score("not a list")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            s.embed(["x"], pooling="max")
        with pytest.raises(ValueError):
            s.score(["x"], top=101)
    s.close()
    with pytest.raises(ValueError):
        s.score(["closed"])


def test_parse_size() -> None:
    assert estream.parse_size("1G") == 1 << 30
    assert estream.parse_size("512M") == 512 << 20
    assert estream.parse_size("1.5G") == 3 << 29
    assert estream.parse_size("600MiB") == 600 << 20
    assert estream.parse_size("64K") == estream.parse_size("64k") == 65536
    assert estream.parse_size("2048") == 2048 and estream.parse_size(12345) == 12345
    assert estream.parse_size("1e3") == 1000
    for bad in ["", "G", "-1G", "0", "1X", "1 G", "nan", "inf", "200%"]:
        with pytest.raises(ValueError):
            estream.parse_size(bad, "/dev/null")


def test_parse_size_percent(tiny: Path) -> None:
    assert estream.parse_size("50%", str(tiny)) == tiny.stat().st_size // 2
    for bad in ["0x10", "auto ", "Auto", "1\x00G", "\udc80", 1.5, None]:
        with pytest.raises(ValueError):
            estream.parse_size(bad, str(tiny))  # type: ignore[arg-type]
    with pytest.raises(OSError):
        estream.parse_size("auto", str(tiny) + ".missing")


def test_mem_auto(tiny: Path) -> None:
    """mem="auto": 80 % of the memory the process may use where the file is larger (a budget),
    else resident (None); in a child whose ESTREAM_MEM_LIMIT sets that memory."""
    size = tiny.stat().st_size
    code = ("import estream, sys\n"
            "print(estream.memory_limit())\n"
            "print(estream.parse_size('auto', sys.argv[1]))\n"
            "s = estream.Session(sys.argv[1], mem='auto')\n"
            "print(s.mem_bytes)\n")
    for limit, budget in [(size * 4, 0), (size, size // 100 * 80)]:
        env = dict(os.environ, ESTREAM_MEM_LIMIT=str(limit))
        p = subprocess.run([sys.executable, "-c", code, str(tiny)], capture_output=True,
                           text=True, env=env, timeout=120)
        lines = p.stdout.splitlines()
        assert lines[:2] == [f"({limit}, 'ESTREAM_MEM_LIMIT')", str(budget)], p.stderr
        if budget == 0:
            assert p.returncode == 0 and lines[2] == "None", p.stderr
        else:  # a budget far below what the run needs besides the experts: refused as one
            assert p.returncode != 0 and "smallest budget that works" in p.stderr, p.stderr


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "ESTREAM_LIBRARY"}
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                          cwd=str(REPO.parent), timeout=120)


def test_library_from_environment() -> None:
    p = _python("import estream; estream.library_version()",
                ESTREAM_LIBRARY="/nonexistent/libestream.so.2")
    assert p.returncode != 0 and "OSError" in p.stderr and "ESTREAM_LIBRARY" in p.stderr
    lib = REPO / "build" / "libestream.so.2"
    if not lib.exists():
        pytest.skip(f"no {lib}")
    p = _python("import estream; print(estream.library_path(), estream.library_version())",
                ESTREAM_LIBRARY=str(lib))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(lib), estream.library_version()]


def test_library_found_without_environment() -> None:
    """Installed from the tree, the package uses its bundled copy."""
    p = _python("import estream; print(estream.library_path())")
    assert p.returncode == 0, p.stderr
    where = p.stdout.strip()
    src = REPO / "python" / "estream"
    if Path(estream.__file__).resolve().parent == src:
        pytest.skip("the tests run on the sources, not an installed package")
    assert where.endswith("estream/_lib/libestream.so.2"), where


def test_model_close_while_a_session_is_open(tiny: Path) -> None:
    """A session uses its model's memory: closing the model under it is refused."""
    m = estream.Model(tiny)
    s = estream.Session(m)
    with pytest.raises(RuntimeError) as e:
        m.close()
    assert "1 session made from this model still open" in str(e.value)
    assert s.score(["still usable"])[0].ids.size > 0  # the model was not released
    s.close()
    m.close()  # now it may
    with pytest.raises(ValueError):
        estream.Session(m)  # a closed model makes no session
    with estream.Model(tiny) as m2:
        with estream.Session(m2) as s2:
            assert s2.score(["x y"])[0].ids.size > 0
    # a session that opened its own model closes it too
    s3 = estream.Session(tiny)
    s3.close()
    assert s3.model._handle is None

"""Fixtures of the estream package's tests: the estream CLI (the reference every number is
compared with), synthetic models it writes, and helpers to run it on JSONL records.

The CLI is $ESTREAM_BIN, default <repo>/build/estream (this folder is <repo>/python/tests).
Models are written once per test session by `estream synth` into a temporary folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]

# Run from python/ with `python -m pytest`, the sources are imported instead of the installed
# package, and they have no bundled library: use the tree's build (ESTREAM_LIBRARY wins).
if "ESTREAM_LIBRARY" not in os.environ:
    import estream as _estream

    _here = Path(_estream.__file__).resolve().parent
    if _here == REPO / "python" / "estream" and not (_here / "_lib").is_dir():
        os.environ["ESTREAM_LIBRARY"] = str(REPO / "build" / "libestream.so.2")
TEXT = Path(os.environ.get("ESTREAM_TEXT", REPO.parent / "shared" / "data" / "text" /
                           "wikitext-2-test.txt"))

#: texts every comparison runs on: ASCII, whitespace, UTF-8 of 2, 3 and 4 bytes, special-token
#: text (parsed by tokenize and embed, not by score), digits and punctuation
TEXTS = [
    "The cat sat on the mat.",
    "hello world",
    "  leading and trailing spaces  ",
    "Line one\nLine two\n\tTabbed line",
    "Café au lait, naïve résumé — déjà vu.",
    "中文文本和日本語のテキスト",
    "emoji 🙂🚀 and symbols ∑∫√",
    "<|endoftext|> special <s> tokens </s>",
    "1234567890 3.14159 2+2=4 (a, b) [c; d] {e: f}",
    "A" * 300,
]


def estream_bin() -> str:
    path = os.environ.get("ESTREAM_BIN", str(REPO / "build" / "estream"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"no estream CLI at {path}: build it (make build/estream) or set ESTREAM_BIN")
    return path


def cli(*args: str, check: bool = True, input: bytes | None = None
        ) -> subprocess.CompletedProcess:
    """Runs the estream CLI; the result's stdout/stderr are str."""
    p = subprocess.run([estream_bin(), *args], input=input, capture_output=True, timeout=600)
    out = subprocess.CompletedProcess(p.args, p.returncode, p.stdout.decode(),
                                      p.stderr.decode())
    if check and p.returncode != 0:
        raise AssertionError(f"estream {' '.join(args)} exited {p.returncode}: {out.stderr}")
    return out


def cli_jsonl(cmd: str, model: Path, records: Iterable[dict], tmp: Path, *extra: str
              ) -> list[dict]:
    """`estream CMD -m MODEL -f IN.jsonl -o OUT.jsonl EXTRA...`: the output records in order."""
    src, dst = tmp / f"{cmd}-in.jsonl", tmp / f"{cmd}-out.jsonl"
    for p in (dst, Path(str(dst) + ".meta")):
        p.unlink(missing_ok=True)
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                   encoding="utf-8")
    cli(cmd, "-m", str(model), "-f", str(src), "-o", str(dst), "-t", "2", *extra)
    return [json.loads(line) for line in dst.read_text(encoding="utf-8").splitlines()]


def f32_bits(values: Any) -> np.ndarray:
    """float32 values (JSON numbers, None as NaN) as their bit patterns, for exact equality."""
    a = np.array([np.nan if v is None else v for v in values], dtype=np.float32)
    return a.view(np.uint32)


def g9(x: float) -> float:
    """A double as estream's JSON writes it (9 significant digits), read back."""
    return float("%.9g" % x)


def synth(dest: Path, preset: str, type_: str = "q8_0", seed: int = 5) -> Path:
    path = dest / f"{preset}-{type_}.gguf"
    if not path.exists():
        cli("synth", "--preset", preset, "--type", type_, "--seed", str(seed), "-o", str(path))
    return path


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def tiny(models_dir: Path) -> Path:
    """OLMoE-shaped, 2 layers, byte-level BPE of 320 tokens, BOS added, context 512."""
    return synth(models_dir, "tiny")


@pytest.fixture(scope="session")
def qwen(models_dir: Path) -> Path:
    """Qwen3-MoE-shaped with Qwen3's real vocabulary (151,936 tokens), context 4096."""
    return synth(models_dir, "tiny-qwen3moe-vocab")


@pytest.fixture(scope="session")
def small(models_dir: Path) -> Path:
    """OLMoE-shaped, hidden 320, 8 experts of 288: big enough to stream slowly."""
    return synth(models_dir, "small")


DATA = Path(os.environ.get("ESTREAM_DATA", REPO.parent / "shared" / "data"))
CHAT_TEMPLATES = REPO / "tests" / "data" / "chat"


@pytest.fixture(scope="session")
def chat_model(models_dir: Path) -> Path:
    """tiny with Llama's SentencePiece vocabulary (BOS <s>; "yes" and "no" one token each) and
    Mixtral's chat template (which writes bos_token itself)."""
    path = models_dir / "chat-spm.gguf"
    if not path.exists():
        cli("synth", "--preset", "tiny", "--type", "q4_0", "--seed", "11", "--vocab",
            str(DATA / "vocab" / "ggml-vocab-llama-spm.gguf"), "--chat-template",
            str(CHAT_TEMPLATES / "mixtral-8x7b-instruct.jinja"), "-o", str(path))
    return path


@pytest.fixture(scope="session")
def chat_qwen(models_dir: Path) -> Path:
    """tiny-qwen3moe-vocab with Qwen3's chat template (system messages, no BOS)."""
    path = models_dir / "chat-qwen.gguf"
    if not path.exists():
        cli("synth", "--preset", "tiny-qwen3moe-vocab", "--type", "q4_0", "--seed", "3",
            "--chat-template", str(CHAT_TEMPLATES / "qwen3.jinja"), "-o", str(path))
    return path


@pytest.fixture(scope="session", params=["tiny", "tiny-qwen3moe-vocab", "tiny-deepseek",
                                         "tiny-lfm2moe", "tiny-gptoss", "tiny-glm4moe",
                                         "tiny-llama4", "tiny-granitemoe",
                                         "tiny-bailingmoe2"])
def any_model(request: pytest.FixtureRequest, models_dir: Path) -> Path:
    """Each family the comparisons run on."""
    return synth(models_dir, request.param)


@pytest.fixture(scope="session")
def text_file() -> Path:
    if not TEXT.is_file():
        pytest.skip(f"no {TEXT} (set ESTREAM_TEXT to an English text file)")
    return TEXT


@pytest.fixture(scope="session", autouse=True)
def interactive_sigint() -> Iterable[None]:
    """SIGINT as an interactive Python has it (KeyboardInterrupt). A Python started with SIGINT
    ignored (nohup, `cmd &` in a script, some CI runners) keeps it ignored, and the package
    rightly leaves an ignored SIGINT alone; the Ctrl-C tests need the ordinary handler."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


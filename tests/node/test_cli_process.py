"""The ``odf`` command as real processes: what it imports, and that it always exits cleanly.

A clean exit: ``odf verify --integrity`` must never print ``OK`` and then die with SIGABRT
(134, "terminate called without an active exception"). That happens when a pool thread
of Arrow's dataset scanner holds the last reference to a Parquet reader over a Python file
object and drops it (which takes the GIL) while the interpreter is finalizing; Python
then ends that thread with ``pthread_exit`` and the forced unwind through Arrow's
``std::thread`` frame calls ``std::terminate``. So `storage.verify` decodes such files
synchronously on the calling thread. A fast start: metadata commands import only what
they use (no grpc, Spark, pandas or Arrow's dataset/Acero modules).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "node" / "examples" / "city-populations.yaml"
ALIASES = ("demo.a", "demo.b", "demo.c")
#: Never needed by commands that only read metadata (and slow to import).
HEAVY = ("grpc", "pyspark", "pandas", "pyarrow.dataset", "pyarrow._acero", "engine.server")
#: Runs `node.cli.main` like the console script and reports the heavy modules it imported.
RUNNER = """
import json, sys
from node.cli import main
try:
    code = main(sys.argv[2:])
except SystemExit as e:
    code = e.code
heavy = [m for m in json.loads(sys.argv[1]) if m in sys.modules]
sys.stdout.flush()
sys.stderr.write("\\nHEAVY " + json.dumps(heavy) + "\\n")
sys.exit(code)
"""


def odf_exe() -> str:
    exe = shutil.which("odf", path=str(Path(sys.executable).parent))
    assert exe is not None, "the odf console script is not installed next to the interpreter"
    return exe


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A workspace of three root datasets; the first has two ingested Parquet slices."""
    root = tmp_path_factory.mktemp("ws")
    env = {**os.environ, "ODF_WORKSPACE": str(root)}
    exe = odf_exe()
    subprocess.run([exe, "init"], env=env, check=True, capture_output=True)
    text = EXAMPLE.read_text(encoding="utf-8")
    manifests = []
    for alias in ALIASES:
        path = root / f"{alias}.yaml"
        path.write_text(text.replace("demo.city-populations", alias), encoding="utf-8")
        manifests.append(str(path))
    subprocess.run([exe, "add", *manifests], env=env, check=True, capture_output=True)
    for s in range(2):
        csv = root / f"slice{s}.csv"
        rows = [f"202{s}-01-01T00:00:00Z,C{r},{r}" for r in range(500)]
        csv.write_text("event_time,city,population\n" + "\n".join(rows) + "\n", encoding="utf-8")
        subprocess.run(
            [exe, "ingest", ALIASES[0], str(csv)], env=env, check=True, capture_output=True
        )
    return env


def imported_heavy(env: dict[str, str], argv: Sequence[str]) -> tuple[int, list[str]]:
    r = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(HEAVY), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    marker = [line for line in r.stderr.splitlines() if line.startswith("HEAVY ")]
    assert marker, r.stderr
    heavy: list[str] = json.loads(marker[-1].removeprefix("HEAVY "))
    return r.returncode, heavy


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["list"],
        ["list", "--output-format", "json"],
        ["log", ALIASES[0]],
        ["log", ALIASES[0], "--output-format", "yaml"],
        ["engine", "--help"],
        ["sql", "--help"],
    ],
    ids=" ".join,
)
def test_metadata_commands_do_not_import_heavy_modules(
    workspace: dict[str, str], argv: list[str]
) -> None:
    code, heavy = imported_heavy(workspace, argv)
    assert code == 0
    assert heavy == []


#: Beyond HEAVY, what listing, ``node status`` and help leave out: the
#: flatbuffer model and codec, the dataset layer, asyncio, signing keys, rich's emoji table.
MODEL = (
    "fbs.model",
    "fbs.codec",
    "storage.dataset",
    "storage.workspace",
    "asyncio",
    "nacl",
    "fbs.keys",
    "rich._emoji_codes",
)
#: What ``odf log`` leaves out when it decodes blocks (JSON/YAML output, or a table of
#: blocks not seen before): only the model may come in.
NOT_FOR_LOG = ("storage.workspace", "asyncio", "nacl", "fbs.keys", "rich._emoji_codes")
#: What ``odf tail`` leaves out: the Python API and the ingest pipeline, and
#: pandas (pyarrow imports it to convert timestamps, or on building arrays from lists),
#: pyarrow.compute (a cast imports it) and numpy (a third of its start: `node.numpy_free`).
NOT_FOR_TAIL = (
    *NOT_FOR_LOG,
    "node.api",
    "node.ingest.pipeline",
    "pandas",
    "pyarrow.compute",
    "numpy",
)


@pytest.mark.parametrize(
    ("argv", "code", "unwanted"),
    [
        (["--help"], 0, MODEL),
        (["list"], 0, MODEL),
        (["list", "--output-format", "json"], 0, MODEL),
        (["node", "status"], 3, MODEL),
        (["log", ALIASES[0]], 0, MODEL),
        (["log", "-n", "1", ALIASES[0]], 0, MODEL),
        (["log", ALIASES[0], "--output-format", "json"], 0, NOT_FOR_LOG),
        (["sql", "SELECT 1"], 0, (*MODEL, "numpy", "pandas", "rich")),
        (["tail", ALIASES[0]], 0, NOT_FOR_TAIL),
        (["tail", "-n", "600", ALIASES[0], "--output-format", "json"], 0, NOT_FOR_TAIL),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_metadata_commands_import_only_what_they_use(
    workspace: dict[str, str], argv: list[str], code: int, unwanted: tuple[str, ...]
) -> None:
    """``odf list`` answers from the chain-state caches and an ``odf log``
    table from the block-rows cache (the first run after a commit refreshes them through
    the dataset layer, so run list and the command once first)."""
    subprocess.run([odf_exe(), "list"], env=workspace, check=True, capture_output=True)
    subprocess.run([odf_exe(), *argv], env=workspace, capture_output=True)
    r = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(unwanted), *argv],
        env=workspace,
        capture_output=True,
        text=True,
        timeout=120,
    )
    marker = [line for line in r.stderr.splitlines() if line.startswith("HEAVY ")]
    assert marker, r.stderr
    assert (r.returncode, json.loads(marker[-1].removeprefix("HEAVY "))) == (code, [])


def test_verify_integrity_imports_no_engine(workspace: dict[str, str]) -> None:
    code, heavy = imported_heavy(workspace, ["verify", "--integrity"])
    assert code == 0
    assert not {"grpc", "pyspark", "engine.server", "pyarrow._acero"} & set(heavy)


def test_engine_defaults_match_the_server() -> None:
    from engine.server import DEFAULT_HOST, DEFAULT_PORT
    from node.commands.engine import ENGINE_DEFAULT_HOST, ENGINE_DEFAULT_PORT

    assert (ENGINE_DEFAULT_HOST, ENGINE_DEFAULT_PORT) == (DEFAULT_HOST, DEFAULT_PORT)


@pytest.mark.slow
def test_hundreds_of_cli_processes_all_exit_zero(workspace: dict[str, str]) -> None:
    """240 real processes (list, log, verify --integrity), 2 at a time: every exit is 0.

    They exit through a normal interpreter teardown (``ODF_NORMAL_EXIT=1`` turns off the
    CLI's ``os._exit`` guard), so a native thread outliving the interpreter is caught.
    """
    exe = odf_exe()
    env = {**workspace, "ODF_NORMAL_EXIT": "1"}
    commands = [[exe, "list"], [exe, "log", ALIASES[0]], [exe, "verify", "--integrity"]]

    def one(i: int) -> tuple[int, str]:
        argv = commands[i % len(commands)]
        r = subprocess.run(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120
        )
        return r.returncode, f"{' '.join(argv[1:])}: {r.stderr.decode(errors='replace')[-300:]}"

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, range(240)))
    failed = [(code, why) for code, why in results if code != 0]
    assert not failed, (Counter(code for code, _ in failed), failed[:3])


def test_append_ingest_imports_no_pandas(tmp_path: Path) -> None:
    """pyarrow imports pandas on its first conversion of a Python value (0.2-0.5 s
    of a CLI run); the Append ingest path builds its Arrow constants from buffers instead."""
    env = {**os.environ, "ODF_WORKSPACE": str(tmp_path)}
    subprocess.run([odf_exe(), "init"], env=env, check=True, capture_output=True, cwd=tmp_path)
    manifest = tmp_path / "append.yaml"
    text = EXAMPLE.read_text(encoding="utf-8").replace("demo.city-populations", "demo.append")
    head, _, _ = text.partition("    merge:\n")
    manifest.write_text(head + "    merge:\n      kind: Append\n", encoding="utf-8")
    subprocess.run([odf_exe(), "add", str(manifest)], env=env, check=True, capture_output=True)
    csv = tmp_path / "in.csv"
    csv.write_text('event_time,city,population\n2030-01-01T00:00:00Z,"Q",1\n', encoding="utf-8")
    code, heavy = imported_heavy(env, ["ingest", "demo.append", str(csv), "--no-progress"])
    assert code == 0
    assert heavy == []


#: What ``odf ingest`` leaves out: numpy (a sixth of a small ingest's run:
#: `node.numpy_free`), pandas, and ed25519 signing (an ingest signs nothing).
NOT_FOR_INGEST = ("numpy", "pandas", "cloudpickle", "nacl", "fbs.keys")


@pytest.mark.parametrize("merge", ["Append", "Ledger"])
def test_ingest_imports_no_numpy(tmp_path: Path, merge: str) -> None:
    """Two ingests (the second one reads the first's slice for a Ledger), both committed,
    without numpy or signing keys in the process; the data read back is what went in."""
    env = {**os.environ, "ODF_WORKSPACE": str(tmp_path)}
    subprocess.run([odf_exe(), "init"], env=env, check=True, capture_output=True, cwd=tmp_path)
    text = EXAMPLE.read_text(encoding="utf-8")
    if merge == "Append":
        head, _, _ = text.partition("    merge:\n")
        text = head + "    merge:\n      kind: Append\n"
    manifest = tmp_path / "ds.yaml"
    manifest.write_text(text, encoding="utf-8")
    subprocess.run([odf_exe(), "add", str(manifest)], env=env, check=True, capture_output=True)
    alias = "demo.city-populations"
    for n, rows in enumerate(
        ['2030-01-01T00:00:00Z,"Q",1', "2030-01-01T00:00:00Z,Q,1\n2031-01-01T00:00:00Z,R,2"]
    ):
        csv = tmp_path / f"in{n}.csv"
        csv.write_text(f"event_time,city,population\n{rows}\n", encoding="utf-8")
        r = subprocess.run(
            [sys.executable, "-c", RUNNER, json.dumps(NOT_FOR_INGEST), "ingest", alias, str(csv)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        assert r.stderr.splitlines()[-1] == "HEAVY []"
        assert "New head:" in r.stdout
    tail = subprocess.run(
        [odf_exe(), "tail", alias, "--output-format", "csv"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    cities = [line.replace('"', "").split(",")[-2:] for line in tail.stdout.splitlines()[1:]]
    expected = (
        [["Q", "1"], ["R", "2"]] if merge == "Ledger" else [["Q", "1"], ["Q", "1"], ["R", "2"]]
    )
    assert cities == expected


def test_cold_verify_imports_no_pandas(workspace: dict[str, str]) -> None:
    """A first verify decodes every slice for its logical hash and offsets,
    without pandas (pyarrow imports it on its first conversion of a Python value)."""
    shutil.rmtree(Path(workspace["ODF_WORKSPACE"]) / ".odf" / "cache", ignore_errors=True)
    code, heavy = imported_heavy(workspace, ["verify", "--integrity"])
    assert code == 0
    assert "pandas" not in heavy

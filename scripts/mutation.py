"""Mutation testing of one module with the tests that cover it (mutmut 3).

Run it through ``scripts/mutation``. The repository is never touched: the working tree's
tracked and untracked (not ignored) files are copied to a private directory, mutmut runs
there (it writes its mutants into ``<copy>/mutants/``), and only the report is printed.

Two kinds of mutants are tested:

* mutmut's mutants of the code inside functions (operators, literals, arguments, ...);
* "constant mutants" made here, since mutmut does not mutate module-level code: every
  integer literal of a module-level assignment (a limit, a size, a type tag) moved by +1
  and -1, each run as ``pytest -x`` over the same tests.

The score leaves out the survivors that only change the text of an error message: a string
literal (or a string replaced by ``None``), or anything inside an f-string, within a ``raise``
statement or a ``_fail(...)`` call. They are listed apart, since a test that pins every
message would be brittle.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("fbs", "storage", "engine", "node", "p2p")

# The narrowest test selection that covers each module (no Spark tests): what a mutant of
# the module is run against, unless --tests says otherwise.
DEFAULT_TESTS: dict[str, list[str]] = {
    "storage/chain.py": ["tests/storage/test_chain_rules.py", "tests/storage/test_chain.py"],
    "fbs/codec/decoder.py": [
        "tests/fbs/test_decoder_rules.py",
        "tests/fbs/test_fuzz_decode.py",
        "tests/fbs/test_codec_vectors.py",
        "tests/fbs/test_codec_roundtrip.py",
        # Half the selection's time (27 of 51 s traced), and they only assert that no
        # exception but MalformedBlock escapes: every mutant is run without them.
        "--deselect=tests/fbs/test_fuzz_decode.py::test_exhaustive_single_byte_mutations_setinfo",
        "--deselect=tests/fbs/test_fuzz_decode.py::test_single_byte_mutations_large_block",
    ],
    "fbs/logical_hash.py": [
        "tests/fbs/test_logical_hash_rules.py",
        "tests/fbs/test_logical_hash.py",
        "tests/fbs/test_logical_hash_dictionary.py",
    ],
    "p2p/receive.py": [
        "tests/p2p/test_receive_rules.py",
        "tests/p2p/test_receive.py",
        "tests/p2p/test_receive_crash.py",
    ],
    # The streaming rewrite is pure text: its tests need no Spark.
    "engine/streaming/rewrite.py": [
        "tests/engine/test_rewrite_rules.py",
        "tests/engine/test_rewrite.py",
    ],
    "engine/streaming/sqltext.py": [
        "tests/engine/test_rewrite_rules.py",
        "tests/engine/test_rewrite.py",
    ],
    # The retained rows and the state file: pure pyarrow and JSON.
    "engine/streaming/retain.py": [
        "tests/engine/test_retain_rules.py",
        "tests/engine/test_retain.py",
        "tests/engine/test_execute_rules.py",
    ],
    "engine/streaming/state.py": [
        "tests/engine/test_state_rules.py",
        "tests/engine/test_rewrite.py",
        "tests/engine/test_execute_rules.py",
    ],
    # The executor needs Spark: its pure parts first, then the stateful tests on a local
    # SparkSession in mutmut's own process (IN_PROCESS_SPARK), forked with it per mutant.
    "engine/streaming/execute.py": [
        "tests/engine/test_execute_rules.py",
        "tests/engine/test_window_gate.py",
        "tests/engine/test_execute_inprocess.py",
    ],
    # Stateless queries over changelog inputs: the in-process tests of that path only.
    "engine/row_changelog.py": [
        "tests/engine/test_execute_inprocess.py::test_stateless_query_selecting_op_writes_its_own",
        "tests/engine/test_execute_inprocess.py::test_stateless_query_over_a_changelog_of_any_shape",
        "tests/engine/test_execute_inprocess.py::test_one_split_folds_to_the_batch_answer",
    ],
}

# Modules whose tests run Spark inside the pytest process: the environment variable that
# lets tests/engine/test_execute_inprocess.py start its local SparkSession (mutmut's
# process is not the test session, which shares one engine and must not start a JVM).
IN_PROCESS_SPARK: dict[str, str] = {
    "engine/streaming/execute.py": "ODF_TEST_INPROCESS_SPARK",
    "engine/row_changelog.py": "ODF_TEST_INPROCESS_SPARK",
}

# A pytest plugin written into the copy's mutants/ folder (on mutmut's import path) and
# loaded by every pytest run mutmut makes: it runs a mutant's tests fastest first, by the
# durations of mutmut's first (stats) pass. mutmut hands pytest the tests reaching the
# mutated function as a set, in no useful order, and stops at the first failure: a
# killed mutant then costs the tests before its first failing one, so the cheap tests
# that reach a function go first. (A survivor still runs every test that reaches it.)
ORDER_PLUGIN: Final = "odf_mutation_order"
ORDER_PLUGIN_SOURCE: Final = '''"""Run the selected tests fastest first (scripts/mutation.py)."""

import json
from pathlib import Path


def pytest_collection_modifyitems(items):
    stats = Path("mutmut-stats.json")
    if not stats.is_file():
        return
    durations = json.loads(stats.read_text()).get("duration_by_test", {})
    items.sort(key=lambda item: durations.get(item.nodeid, float("inf")))
'''

# mutmut's exit-code verdicts, folded into the four this report counts.
KILLED = ("killed", "timeout", "caught by type check", "segfault")
SURVIVED = ("survived",)


@dataclass
class Verdicts:
    """The verdict of every tested mutant, and which survivors only change a message."""

    status: dict[str, str] = field(default_factory=dict)
    message_only: set[str] = field(default_factory=set)
    diffs: dict[str, str] = field(default_factory=dict)

    def survivors(self) -> list[str]:
        """Mutants no test killed, sorted."""
        return sorted(n for n, s in self.status.items() if s in SURVIVED)

    def counted(self, *, drop_messages: bool) -> tuple[int, int]:
        """(killed, killed + survived), optionally without the message-only mutants."""
        killed = total = 0
        for name, status in self.status.items():
            if drop_messages and name in self.message_only:
                continue
            if status in KILLED:
                killed += 1
                total += 1
            elif status in SURVIVED:
                total += 1
        return killed, total


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line: a module, its tests, sampling and where to work."""
    p = argparse.ArgumentParser(prog="scripts/mutation", description=__doc__.split("\n")[0])
    p.add_argument("module", help="the file to mutate, e.g. storage/chain.py")
    p.add_argument("--tests", nargs="+", help="test files or node ids (default: per module)")
    p.add_argument("--sample", type=int, default=0, help="test a seeded sample of N mutants")
    p.add_argument("--seed", type=int, default=19, help="the sample's seed (default 19)")
    p.add_argument("--workdir", type=Path, help="private copy (default /tmp/odf-mutation/<m>)")
    p.add_argument("--no-constants", action="store_true", help="skip the constant mutants")
    p.add_argument("--constants-only", action="store_true", help="test only the constant mutants")
    p.add_argument("--json", type=Path, help="also write the verdicts as JSON to this file")
    p.add_argument(
        "--rerun",
        type=Path,
        metavar="JSON",
        help="test again only the survivors of an earlier --json file (after adding tests)",
    )
    p.add_argument(
        "--report-only", action="store_true", help="report the verdicts already in --workdir"
    )
    p.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def tracked_files() -> list[str]:
    """The working tree's tracked and untracked, not ignored, files (no .venv, no caches)."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return [f for f in out.split("\0") if f and (REPO / f).is_file()]


def make_copy(workdir: Path) -> None:
    """Copy the working tree to ``workdir`` (fresh), so mutants never touch the repository."""
    if workdir.exists():
        shutil.rmtree(workdir)
    for rel in tracked_files():
        if rel.split("/")[0] in (*PACKAGES, "tests") or rel == "pyproject.toml":
            dst = workdir / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dst)


def toml_list(items: Sequence[str]) -> str:
    """A TOML array of strings."""
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def write_config(workdir: Path, module: str, tests: Sequence[str]) -> None:
    """Append mutmut's settings to the copy's pyproject.toml.

    Every package is copied into mutants/ so that imports resolve there and not to the
    editable install; hypothesis gets a fixed seed so a verdict does not depend on the run;
    `ORDER_PLUGIN` (written by `generate`) orders each mutant's tests.
    """
    config = f"""
[tool.mutmut]
source_paths = {toml_list(PACKAGES)}
only_mutate = {toml_list([module])}
pytest_add_cli_args_test_selection = {toml_list(tests)}
pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "{ORDER_PLUGIN}", "--hypothesis-seed=0"]
timeout_multiplier = 5.0
timeout_constant = 2.0
use_git_change_detection = false
use_setproctitle = false
"""
    with (workdir / "pyproject.toml").open("a") as f:
        f.write(config)


def test_env(module: str) -> dict[str, str]:
    """The environment of the module's test runs (`IN_PROCESS_SPARK`)."""
    env = dict(os.environ)
    if module in IN_PROCESS_SPARK:
        env[IN_PROCESS_SPARK[module]] = "1"
    return env


def mutmut(workdir: Path, *args: str, env: dict[str, str] | None = None) -> None:
    """Run the mutmut command line in the copy, with one worker (the machine is shared).

    mutmut forks each mutant's test run from its own process (``process_isolation`` =
    ``fork``, the default): a SparkSession started by its first test run serves them all.
    """
    exe = Path(sys.executable).parent / "mutmut"
    log = workdir / "mutmut.log"
    print(f"mutmut {args[0]}: output in {log}", flush=True)
    with log.open("a") as out:
        subprocess.run([str(exe), *args], cwd=workdir, check=True, stdout=out, stderr=out, env=env)


def generate(workdir: Path) -> list[str]:
    """Generate the mutants (no tests run), add `ORDER_PLUGIN`, and return the mutants'
    names, sorted."""
    with (workdir / "mutmut.log").open("a") as log:
        subprocess.run(
            [sys.executable, __file__, "--generate-only", "unused"],
            cwd=workdir,
            check=True,
            stdout=log,
            stderr=log,
        )
    (workdir / "mutants" / f"{ORDER_PLUGIN}.py").write_text(ORDER_PLUGIN_SOURCE)
    return sorted(load_results(workdir))


def generate_here() -> None:
    """Inside the copy: mutmut's own generation steps, without its test runs."""
    # Imported here: mutmut reads its configuration (in the copy) at import time.
    from mutmut.__main__ import create_mutants
    from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir

    Path("mutants").mkdir(exist_ok=True)
    copy_src_dir()
    copy_also_copy_files()
    create_mutants(1)


def meta_files(workdir: Path) -> Iterator[Path]:
    """mutmut's per-file result files."""
    yield from (workdir / "mutants").rglob("*.py.meta")


def load_results(workdir: Path) -> dict[str, str]:
    """Every generated mutant with its verdict (``not checked`` before a run)."""
    from mutmut.stats import status_by_exit_code

    results: dict[str, str] = {}
    for meta in meta_files(workdir):
        data = json.loads(meta.read_text())
        for name, code in data["exit_code_by_key"].items():
            results[name] = status_by_exit_code[code]
    return results


def run_mutmut(workdir: Path, module: str, names: Sequence[str]) -> dict[str, str]:
    """Test the given mutants (all when empty) and return every verdict."""
    mutmut(workdir, "run", "--max-children", "1", *names, env=test_env(module))
    results = load_results(workdir)
    return {n: results[n] for n in names} if names else results


def function_sources(workdir: Path, names: Sequence[str]) -> dict[str, tuple[str, str]]:
    """The original and the mutated source of each mutant's function, read through mutmut."""
    code = (
        "import json, sys\n"
        "import libcst as cst\n"
        "from mutmut.mutation.diff_apply import find_mutant, read_functions_from_index,"
        " read_mutants_module, read_original_function, read_mutant_function\n"
        "out = {}\n"
        "for name in json.load(sys.stdin):\n"
        "    path = find_mutant(name).path\n"
        "    fs = read_functions_from_index(name, path)\n"
        "    if fs is None:\n"
        "        module = read_mutants_module(path)\n"
        "        fs = (read_original_function(module, name), read_mutant_function(module, name))\n"
        "    out[name] = [cst.Module([f]).code for f in fs]\n"
        "json.dump(out, sys.stdout)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=workdir,
        check=True,
        capture_output=True,
        input=json.dumps(list(names)).encode(),
    )
    return {k: (v[0], v[1]) for k, v in json.loads(proc.stdout).items()}


def differing_nodes(
    a: object, b: object, parents: tuple[ast.AST, ...]
) -> Iterator[tuple[object, object, tuple[ast.AST, ...]]]:
    """The smallest pairs of nodes that differ between two ASTs, with their ancestors."""
    if type(a) is not type(b):
        yield a, b, parents
    elif isinstance(a, ast.AST) and isinstance(b, ast.AST):
        for name in a._fields:
            yield from differing_nodes(getattr(a, name), getattr(b, name), (*parents, a))
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield a, b, parents
        else:
            for x, y in zip(a, b, strict=True):
                yield from differing_nodes(x, y, parents)
    elif a != b:
        yield a, b, parents


def is_text(node: object) -> bool:
    """A string literal, an f-string, a part of one, or ``None`` (a message dropped)."""
    if isinstance(node, ast.JoinedStr | ast.FormattedValue):
        return True
    if isinstance(node, ast.Constant):
        return node.value is None or isinstance(node.value, str)
    return isinstance(node, str)


def in_error_report(parents: tuple[ast.AST, ...]) -> bool:
    """Whether a node sits in a ``raise`` statement or in an argument of ``_fail(...)``."""
    for node in parents:
        if isinstance(node, ast.Raise):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "_fail"
        ):
            return True
    return False


def is_message_only(orig: str, mutant: str) -> bool:
    """Whether a mutant only changes the text of an error message."""
    pairs = list(differing_nodes(ast.parse(orig), ast.parse(mutant), ()))
    return bool(pairs) and all(
        in_error_report(parents) and (is_text_change(a, b, parents) or in_fstring(parents))
        for a, b, parents in pairs
    )


def in_fstring(parents: tuple[ast.AST, ...]) -> bool:
    """Whether a node is part of an f-string: what it changes is only that text."""
    return any(isinstance(node, ast.JoinedStr) for node in parents)


def is_text_change(a: object, b: object, parents: tuple[ast.AST, ...]) -> bool:
    """Whether one differing pair of nodes is a message text changed or dropped."""
    if isinstance(a, ast.AST) or isinstance(b, ast.AST):
        return is_text(a) and is_text(b)
    # Plain values differ inside a node (a Constant's value): that node must be text.
    return bool(parents) and is_text(parents[-1]) and is_text(a) and (b is None or is_text(b))


def classify(workdir: Path, verdicts: Verdicts) -> None:
    """Fill in the diffs of the survivors and which of them only change a message."""
    names = [n for n in verdicts.survivors() if not n.startswith("const:")]
    for name, (orig, mutant) in function_sources(workdir, names).items():
        verdicts.diffs[name] = one_line_diff(orig, mutant)
        if is_message_only(orig, mutant):
            verdicts.message_only.add(name)


def one_line_diff(orig: str, mutant: str) -> str:
    """The changed lines of a mutant, as ``old → new``."""
    a, b = orig.splitlines(), mutant.splitlines()
    old = [x.strip() for x in a if x not in b]
    new = [x.strip() for x in b if x not in a]
    return f"{' '.join(old)} → {' '.join(new)}"


@dataclass(frozen=True)
class ConstantMutant:
    """One module-level integer literal moved by ``delta``."""

    line: int
    col: int
    end_col: int
    value: int
    delta: int

    @property
    def name(self) -> str:
        return f"const:{self.line}:{self.col}:{self.value}->{self.value + self.delta}"


def constant_mutants(source: str) -> list[ConstantMutant]:
    """Every integer literal of a module-level assignment, moved by +1 and by -1."""
    found: list[ConstantMutant] = []
    for stmt in ast.parse(source).body:
        if not isinstance(stmt, ast.Assign | ast.AnnAssign) or stmt.value is None:
            continue
        for node in ast.walk(stmt.value):
            if isinstance(node, ast.Constant) and type(node.value) is int:
                assert node.end_col_offset is not None and node.lineno == node.end_lineno
                for delta in (1, -1):
                    found.append(
                        ConstantMutant(
                            node.lineno, node.col_offset, node.end_col_offset, node.value, delta
                        )
                    )
    return found


def apply_constant(source: str, m: ConstantMutant) -> str:
    """The source with one constant mutant applied."""
    lines = source.splitlines(keepends=True)
    line = lines[m.line - 1]
    lines[m.line - 1] = line[: m.col] + str(m.value + m.delta) + line[m.end_col :]
    return "".join(lines)


def run_constants(workdir: Path, module: str, tests: Sequence[str]) -> dict[str, str]:
    """Test every constant mutant with ``pytest -x`` in a second private copy."""
    target = workdir / "constants"
    make_copy(target)
    started = time.monotonic()
    if pytest_passes(target, module, tests, timeout=None) is not True:
        raise SystemExit(f"the tests fail on the unmutated copy in {target}")
    # Like mutmut: a mutant that makes the tests much slower (a chunk size of 0) is a timeout.
    limit = 60 + 5 * (time.monotonic() - started)
    path = target / module
    source = path.read_text()
    verdicts: dict[str, str] = {}
    for m in constant_mutants(source):
        path.write_text(apply_constant(source, m))
        passed = pytest_passes(target, module, tests, timeout=limit)
        verdicts[m.name] = {True: "survived", False: "killed", None: "timeout"}[passed]
        print(f"    {m.name}: {verdicts[m.name]}", flush=True)
    path.write_text(source)
    return verdicts


def pytest_passes(
    workdir: Path, module: str, tests: Sequence[str], timeout: float | None
) -> bool | None:
    """Whether the tests pass in ``workdir`` (its packages, not the install); None: timeout."""
    env = dict(test_env(module), PYTHONPATH=str(workdir))
    args = ["-x", "-q", "-p", "no:cacheprovider", "--hypothesis-seed=0", *tests]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", *args],
            cwd=workdir,
            env=env,
            capture_output=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None
    return proc.returncode == 0


def percent(killed: int, total: int) -> str:
    """A score as ``killed / total = p %``."""
    return f"{killed} / {total} = {100 * killed / total:.1f} %" if total else "no mutants"


def report(module: str, verdicts: Verdicts, generated: int, seconds: float) -> None:
    """Print the score, the survivors and the message-only survivors apart."""
    counts = Counter(verdicts.status.values())
    print(f"\n== mutation report: {module}")
    print(f"mutmut mutants generated: {generated}; tested: {len(verdicts.status)}")
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"score: {percent(*verdicts.counted(drop_messages=False))}")
    print(f"score without message-only mutants: {percent(*verdicts.counted(drop_messages=True))}")
    survivors = verdicts.survivors()
    real = [n for n in survivors if n not in verdicts.message_only]
    print(f"\nsurvivors ({len(real)}):")
    for name in real:
        print(f"  {name}: {verdicts.diffs.get(name, '')}")
    print(f"\nmessage-only survivors ({len(verdicts.message_only)}):")
    for name in sorted(verdicts.message_only):
        print(f"  {name}: {verdicts.diffs[name]}")
    print(f"\nwall time: {seconds / 60:.1f} min")


def main(argv: Sequence[str]) -> int:
    """Copy, generate, (sample,) run, classify and report."""
    args = parse_args(argv)
    if args.generate_only:
        generate_here()
        return 0
    module = args.module
    tests = args.tests or DEFAULT_TESTS.get(module)
    if not tests:
        print(f"no default tests for {module}: pass --tests", file=sys.stderr)
        return 2
    slug = module.replace("/", ".").removesuffix(".py")
    workdir = (args.workdir or Path("/tmp/odf-mutation") / slug).resolve()
    if REPO in (workdir, *workdir.parents):
        print("the work directory must lie outside the repository", file=sys.stderr)
        return 2
    if args.constants_only and (args.no_constants or args.report_only or args.rerun):
        print(
            "--constants-only excludes --no-constants, --report-only and --rerun", file=sys.stderr
        )
        return 2
    start = time.monotonic()
    names: list[str] = []
    if args.constants_only:
        verdicts = Verdicts(status={})
    elif args.report_only:
        names = sorted(load_results(workdir))
        tested = {n: s for n, s in load_results(workdir).items() if s != "not checked"}
        verdicts = Verdicts(status=tested)
    else:
        verdicts, names = run_all(args, workdir, module, tests)
    if not args.constants_only:
        classify(workdir, verdicts)
    if not args.no_constants and not args.report_only:
        verdicts.status.update(run_constants(workdir, module, tests))
    report(module, verdicts, len(names), time.monotonic() - start)
    if args.json:
        args.json.write_text(json.dumps(asdict_verdicts(verdicts), indent=1))
    return 0


def run_all(
    args: argparse.Namespace, workdir: Path, module: str, tests: Sequence[str]
) -> tuple[Verdicts, list[str]]:
    """Copy the tree, generate the mutants and test all of them or a seeded sample."""
    make_copy(workdir)
    write_config(workdir, module, tests)
    names = generate(workdir)
    if args.rerun:
        return rerun_survivors(workdir, module, args.rerun), names
    chosen: list[str] = []
    if 0 < args.sample < len(names):
        chosen = sorted(random.Random(args.seed).sample(names, args.sample))
    return Verdicts(status=run_mutmut(workdir, module, chosen)), names


def rerun_survivors(workdir: Path, module: str, earlier: Path) -> Verdicts:
    """The verdicts of an earlier run, its mutmut survivors tested again."""
    status: dict[str, str] = json.loads(earlier.read_text())["status"]
    again = [n for n, s in sorted(status.items()) if s in SURVIVED and not n.startswith("const:")]
    kept = {n: s for n, s in status.items() if not n.startswith("const:")}
    if again:
        kept.update(run_mutmut(workdir, module, again))
    return Verdicts(status=kept)


def asdict_verdicts(verdicts: Verdicts) -> dict[str, object]:
    """The verdicts as plain JSON data."""
    return {
        "status": verdicts.status,
        "message_only": sorted(verdicts.message_only),
        "diffs": verdicts.diffs,
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

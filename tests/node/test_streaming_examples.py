"""kamu's example pipelines on the Spark engine, end to end through the ``odf`` executable.

Every test runs the real console script as subprocesses in a fresh workspace, on the test
session's shared engine (``$ODF_ENGINE_ADDRESS``, no JVM of its own): manifests written for
Flink/RisingWave are added with ``odf add --engine spark``, roots are fed in several
batches with ``odf ingest``, derivatives are pulled after each batch, and the records (read
with `node.api`, once with ``odf export --output-format ndjson``) are checked against
answers computed in plain Python (`tests.node.streaming_data`). Stateful derivatives then
pass ``odf verify`` (replay); the leaderboard also gets ``odf validate`` and a crash
between the engine run and the commit.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.process import EngineProcess
from fbs.model import AddPushSource, SetTransform, TransformSql
from node.api import open_workspace
from node.cli_util import EXIT_INVALID, EXIT_OK
from storage.workspace import Workspace
from tests.node import streaming_data as data
from tests.node.streaming_data import Row, as_multiset, fold, parse_ts

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

EXE = shutil.which("odf", path=str(Path(sys.executable).parent))

#: Exit code of the pull that "dies" between the engine run and the commit.
CRASH_EXIT = 137
#: Runs ``odf ARGS...`` with `node.transform.commit_transform` replaced by a hard exit:
#: the process dies after the engine wrote the output and checkpoint, before any commit.
CRASH_SCRIPT = f"""
import os, sys
import node.transform

def _die(*args, **kwargs):
    sys.stdout.flush()
    os._exit({CRASH_EXIT})

node.transform.commit_transform = _die
from node.cli import main
sys.exit(main(sys.argv[1:]))
"""


class Odf:
    """The ``odf`` console script in one workspace, on the shared engine."""

    def __init__(self, root: Path, engine_address: str) -> None:
        assert EXE is not None, "console script `odf` is not installed in the venv"
        self.exe = EXE
        self.root = root
        self.env = {
            **os.environ,
            "ODF_WORKSPACE": str(root),
            "ODF_ENGINE_ADDRESS": engine_address,
        }
        self._files = 0

    def run(self, *argv: str, expect: int = EXIT_OK) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [self.exe, *argv],
            env=self.env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == expect, f"odf {' '.join(argv)} -> {r.returncode}\n{r.stderr}"
        assert "Traceback" not in r.stderr, r.stderr
        return r

    def write(self, text: str, suffix: str) -> Path:
        self._files += 1
        path = self.root / f"f{self._files}{suffix}"
        path.write_text(text)
        return path

    def add(self, *manifests: str, engine: str | None = "spark", expect: int = EXIT_OK) -> str:
        paths = [str(self.write(m, ".yaml")) for m in manifests]
        flags = ["--engine", engine] if engine else []
        return self.run("add", *flags, *paths, expect=expect).stderr

    def ingest(self, dataset: str, rows: Sequence[Row]) -> None:
        assert rows, "an empty batch is not a batch"
        path = self.write("".join(json.dumps(r) + "\n" for r in rows), ".json")
        self.run("ingest", dataset, str(path))

    def pull(self, *datasets: str) -> None:
        self.run("pull", *datasets)

    def records(self, dataset: str, *, via_export: bool = False) -> list[Row]:
        """Every record in offset order, timestamps as ``odf export`` spells them (to the second).

        Read in-process with `node.api` (no interpreter start per read) unless
        ``via_export``: ``odf export --output-format ndjson``.
        """
        if via_export:
            out = self.run("export", dataset, "--output-format", "ndjson").stdout
            rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        else:
            with open_workspace(self.root) as ws:
                table = ws.dataset(dataset).to_arrow()
            rows = [
                {k: data.ts(v) if isinstance(v, dt.datetime) else v for k, v in r.items()}
                for r in table.to_pylist()
            ]
        assert [r["offset"] for r in rows] == list(range(len(rows))), "offsets not 0..n-1"
        return rows

    def head(self, dataset: str) -> str:
        ws = Workspace.open(self.root)
        head = ws.get(dataset).head()
        return str(head)

    def verify(self, *datasets: str) -> None:
        out = self.run("verify", *datasets, "--output-format", "json").stdout
        reports = json.loads(out)
        assert len(reports) == len(datasets)
        for rep in reports:
            assert rep["ok"] and rep["transformsReplayed"] > 0, rep


@pytest.fixture
def odf(tmp_path: Path, engine_process: EngineProcess) -> Iterator[Odf]:
    cli = Odf(tmp_path, engine_process.address)
    cli.run("init")
    yield cli


def normalized(rows: Sequence[Row], time_columns: Sequence[str]) -> list[Row]:
    """``rows`` with the timestamp columns parsed (export and reference spell them alike)."""
    return [{**r, **{c: parse_ts(r[c]) for c in time_columns}} for r in rows]


def assert_folds_to(
    records: Sequence[Row], expected: Sequence[Row], columns: Sequence[str], times: Sequence[str]
) -> None:
    got = fold(normalized(records, times), columns)
    want = as_multiset(normalized(expected, times), columns)
    missing, extra = want - got, got - want
    assert not missing and not extra, f"missing {sorted(missing)}\nextra {sorted(extra)}"


# -- odf add --engine ----------------------------------------------------------------------------


PLAYER_SCORES = data.root_manifest(
    "player-scores",
    ["match_time TIMESTAMP", "match_id BIGINT", "player_id STRING", "score BIGINT"],
    ["match_id", "player_id"],
    event_time="match_time",
)
LEADERBOARD = data.derivative_manifest(
    "leaderboard",
    {"player-scores": "player_scores"},
    "risingwave",
    query=data.LEADERBOARD_QUERY,
    event_time="match_time",
)


def test_add_refuses_another_engine_unless_told_to_run_it_on_spark(
    tmp_path: Path,
) -> None:
    cli = Odf(tmp_path, "127.0.0.1:1")  # no transform runs here
    cli.run("init")
    flink_preprocess = data.root_manifest("raw", ["event_time TIMESTAMP"], ["event_time"]).replace(
        "    merge:",
        "    preprocess:\n      kind: Sql\n      engine: datafusion\n      version: '42'\n"
        "      query: SELECT * FROM input\n    merge:",
    )
    # Refused with exit 4 and one line naming the flag; nothing at all is added, not
    # even the root named first on the same command line.
    for manifests in ([PLAYER_SCORES, LEADERBOARD], [flink_preprocess]):
        err = cli.add(*manifests, engine=None, expect=EXIT_INVALID)
        assert err.count("\n") == 1 and "--engine spark" in err, err
        assert ("risingwave" in err) or ("datafusion" in err)
    assert json.loads(cli.run("list", "--output-format", "json").stdout) == []
    # An unknown engine is a usage error.
    cli.add(PLAYER_SCORES, engine="flink", expect=2)

    cli.add(PLAYER_SCORES, LEADERBOARD, flink_preprocess)
    ws = Workspace.open(tmp_path)
    from engine.spark import engine_identity

    def sql_transforms(alias: str) -> list[TransformSql]:
        out = []
        for _h, _raw, block in ws.get(alias).iter_blocks():
            e = block.event
            t = e.transform if isinstance(e, SetTransform) else None
            t = e.preprocess if isinstance(e, AddPushSource) else t
            if isinstance(t, TransformSql):
                out.append(t)
        return out

    (lb,) = sql_transforms("leaderboard")
    # The block names the engine that runs it, pinned to its identity; the query is kept.
    assert lb.engine == "spark" and lb.version == engine_identity()
    assert lb.queries is not None  # normalized: one unaliased step
    assert [q.query.strip() for q in lb.queries] == [data.LEADERBOARD_QUERY.strip()]
    (pre,) = sql_transforms("raw")
    assert pre.engine == "spark" and pre.queries is not None
    assert [q.query for q in pre.queries] == ["SELECT * FROM input"]
    # A Spark manifest is unchanged by the flag (and accepted without it).
    assert yaml.safe_load(LEADERBOARD)["content"]["metadata"][0]["transform"]["engine"] == (
        "risingwave"
    )
    spark_lb = LEADERBOARD.replace("name: leaderboard", "name: lb2").replace(
        "engine: risingwave", "engine: spark"
    )
    cli.add(spark_lb, engine=None)
    (lb2,) = sql_transforms("lb2")
    assert lb2 == lb


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        (
            "SELECT SESSION_START(match_time, INTERVAL '1' HOUR) AS match_time, count(*) AS n "
            "FROM player_scores GROUP BY SESSION(match_time, INTERVAL '1' HOUR)",
            "session windows",
        ),
        (
            "SELECT TUMBLE_START(match_time, INTERVAL '1' MONTH) AS match_time, count(*) AS n "
            "FROM player_scores GROUP BY TUMBLE(match_time, INTERVAL '1' MONTH)",
            "MONTH windows",
        ),
        (
            "SELECT p.match_time FROM player_scores AS p JOIN player_scores FOR SYSTEM_TIME AS "
            "OF p.match_time AS q ON p.player_id = q.player_id",
            "temporalTables",
        ),
    ],
)
def test_add_refuses_a_query_without_streaming_semantics_by_name(
    tmp_path: Path, query: str, needle: str
) -> None:
    cli = Odf(tmp_path, "127.0.0.1:1")  # refused before any engine is needed
    cli.run("init")
    cli.add(PLAYER_SCORES)
    before = cli.run("list", "--output-format", "json").stdout
    manifest = yaml.safe_load(LEADERBOARD)
    manifest["content"]["name"] = "bad"
    manifest["content"]["metadata"][0]["transform"]["query"] = query
    err = cli.add(yaml.safe_dump(manifest), expect=EXIT_INVALID)
    assert err.count("\n") == 1 and needle in err and "bad" in err, err
    assert cli.run("list", "--output-format", "json").stdout == before


# -- a. leaderboard (top-N changelog), e. crash before commit, f. verify + validate -------------


def test_leaderboard_top2_changelog_exactly_once_across_a_crash(odf: Odf) -> None:
    odf.add(PLAYER_SCORES, LEADERBOARD)
    b1, b2, b3 = data.PLAYER_SCORE_BATCHES

    def summary() -> list[tuple[int, int, int, str, int]]:
        return [
            (r["offset"], r["op"], r["place"], r["player_id"], r["score"])
            for r in odf.records("leaderboard")
        ]

    odf.ingest("player-scores", b1)
    odf.pull("leaderboard")
    assert summary() == data.LEADERBOARD_EXPECTED[:2]

    # Round 2: the pull dies after the engine ran (output + checkpoint written), before
    # the commit. Nothing is committed; the re-run commits the round once.
    odf.ingest("player-scores", b2)
    head = odf.head("leaderboard")
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, "pull", "leaderboard"],
        env=odf.env,
        cwd=odf.root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert crashed.returncode == CRASH_EXIT, crashed.stderr
    assert odf.head("leaderboard") == head
    assert summary() == data.LEADERBOARD_EXPECTED[:2]
    odf.pull("leaderboard")
    assert summary() == data.LEADERBOARD_EXPECTED[:4]

    odf.ingest("player-scores", b3)
    odf.pull("leaderboard")
    assert summary() == data.LEADERBOARD_EXPECTED
    rows = odf.records("leaderboard", via_export=True)
    assert [r["match_id"] for r in rows] == [1, 1, 1, 2, 1, 2, 3, 1]
    assert all(r["match_time"].startswith("2000-01-0") for r in rows)
    # Up to date: a pull adds nothing.
    odf.pull("leaderboard")
    assert len(odf.records("leaderboard")) == len(data.LEADERBOARD_EXPECTED)

    odf.verify("leaderboard")
    out = odf.run("validate", "leaderboard", "--output-format", "json").stdout
    (report,) = json.loads(out)
    verdicts = [a["verdict"] for a in report["attestations"]]
    assert len(verdicts) == 3 and set(verdicts) == {"reproduced"}, report


# -- b. trading: OVER running sums + inner temporal join -----------------------------------------

TRANSACTIONS = data.root_manifest(
    "my.trading.transactions",
    [
        "event_time TIMESTAMP",
        "symbol STRING",
        "quantity BIGINT",
        "price DOUBLE",
        "settlement DOUBLE",
    ],
    ["event_time", "symbol"],
)
TICKERS = data.root_manifest(
    "com.yahoo.finance.tickers.daily",
    ["event_time TIMESTAMP", "symbol STRING", "close DOUBLE", "close_adj DOUBLE"],
    ["event_time", "symbol"],
)
HOLDINGS = data.derivative_manifest(
    "my.trading.holdings",
    {"my.trading.transactions": "my.trading.transactions"},
    "flink",
    query=data.HOLDINGS_QUERY,
)
MARKET_VALUE = data.derivative_manifest(
    "my.trading.holdings.market-value",
    {
        "com.yahoo.finance.tickers.daily": "com.yahoo.finance.tickers.daily",
        "my.trading.holdings": "my.trading.holdings",
    },
    "flink",
    query=data.MARKET_VALUE_QUERY,
    temporal_tables=[("my.trading.holdings", ["symbol"])],
)
HOLDING_COLS = ["event_time", "symbol", "quantity", "price", "settlement", "cum_quantity",
                "cum_balance"]  # fmt: skip
MARKET_COLS = ["event_time", "symbol", "cum_quantity", "quantity", "market_value"]


def test_trading_holdings_and_market_value(odf: Odf) -> None:
    odf.add(TRANSACTIONS, TICKERS, HOLDINGS, MARKET_VALUE)
    cuts = ["2020-02-01", "2020-03-01"]
    tx_batches = data.split_by_time(data.transactions(), "event_time", cuts)
    tick_batches = data.split_by_time(data.tickers(), "event_time", cuts)
    assert [len(b) for b in tx_batches] == [3, 3, 0]  # transactions end in February
    derivatives = ("my.trading.holdings", "my.trading.holdings.market-value")

    txs: list[Row] = []
    ticks: list[Row] = []

    def check(tx_watermark: str) -> list[Row]:
        holdings = odf.records("my.trading.holdings")
        reference = data.holdings_reference(txs)
        assert_folds_to(holdings, reference, HOLDING_COLS, ["event_time"])
        until = min(tx_watermark, ticks[-1]["event_time"])
        market = odf.records("my.trading.holdings.market-value")
        expected = data.market_value_reference(ticks, reference, until)
        assert expected, "the reference must not be empty"
        assert_folds_to(market, expected, MARKET_COLS, ["event_time"])
        return market

    for tx_batch, tick_batch in zip(tx_batches, tick_batches, strict=True):
        if tx_batch:
            odf.ingest("my.trading.transactions", tx_batch)
        odf.ingest("com.yahoo.finance.tickers.daily", tick_batch)
        txs += tx_batch
        ticks += tick_batch
        odf.pull(*derivatives)
        market = check(txs[-1]["event_time"])

    # Rows stop at the transactions' watermark (the last transaction, 2020-02-14) ...
    last_tx = txs[-1]["event_time"]
    assert max(r["event_time"] for r in market) == last_tx
    assert ticks[-1]["event_time"] > last_tx
    # ... until the transactions' owner says no older transaction will come.
    odf.run("pull", "my.trading.transactions", "--set-watermark", "2020-04-01T00:00:00Z")
    odf.pull(*derivatives)
    market = check("2020-04-01T00:00:00Z")
    assert max(r["event_time"] for r in market) == ticks[-1]["event_time"]
    odf.verify(*derivatives)


# -- c. currency conversion: LEFT temporal join ------------------------------------------------

RATES = data.root_manifest(
    "com.example.currency.rates",
    ["date TIMESTAMP", "currency_base STRING", "currency_target STRING", "rate DOUBLE"],
    ["date", "currency_base"],
    event_time="date",
)
ACCOUNT = data.root_manifest(
    "my.finance.transactions",
    ["event_time TIMESTAMP", "description STRING", "currency STRING", "amount DOUBLE"],
    ["event_time", "description"],
)
CONVERTED = data.derivative_manifest(
    "my.finance.transactions.usd",
    {"my.finance.transactions": "transactions", "com.example.currency.rates": "rates"},
    "flink",
    query=data.CONVERSION_QUERY,
    temporal_tables=[("rates", ["currency_base"])],
)
CONVERTED_COLS = ["event_time", "description", "currency_orig", "amount_orig", "currency", "amount"]


def test_currency_conversion_left_temporal_join(odf: Odf) -> None:
    odf.add(RATES, ACCOUNT, CONVERTED)
    cuts = ["2020-01-05", "2020-01-09"]
    tx_batches = data.split_by_time(data.account_transactions(), "event_time", cuts)
    rate_batches = data.split_by_time(data.rates(), "date", cuts)
    txs: list[Row] = []
    rates: list[Row] = []
    for tx_batch, rate_batch in zip(tx_batches, rate_batches, strict=True):
        odf.ingest("my.finance.transactions", tx_batch)
        odf.ingest("com.example.currency.rates", rate_batch)
        txs += tx_batch
        rates += rate_batch
        odf.pull("my.finance.transactions.usd")
        until = min(txs[-1]["event_time"], rates[-1]["date"])
        expected = data.conversion_reference(txs, rates, until)
        got = odf.records("my.finance.transactions.usd")
        assert_folds_to(got, expected, CONVERTED_COLS, ["event_time"])
    # Transactions before the first rate of their currency are kept, NULL-padded:
    # CAD's coffee (no CAD rate before Jan 3), EUR's books and train (EUR from Jan 6).
    final = odf.records("my.finance.transactions.usd")
    padded = sorted(r["description"] for r in final if r["amount"] is None)
    assert padded == ["books", "coffee", "train"]
    assert all(r["currency"] is None for r in final if r["amount"] is None)
    # The rates reach Jan 12: every transaction is in, each exactly once.
    assert sorted(r["description"] for r in final) == sorted(t["description"] for t in txs)
    odf.verify("my.finance.transactions.usd")


# -- d. overdue shipments: interval join + tumbling window ---------------------------------------

ORDERS = data.root_manifest(
    "com.acme.orders",
    ["event_time TIMESTAMP", "order_id BIGINT", "quantity BIGINT"],
    ["order_id"],
)
SHIPMENTS = data.root_manifest(
    "com.acme.shipments",
    ["event_time TIMESTAMP", "shipment_id BIGINT", "order_id BIGINT", "quantity BIGINT"],
    ["shipment_id"],
)
OVERDUE = data.derivative_manifest(
    "com.acme.shipments.overdue",
    {"com.acme.orders": "orders", "com.acme.shipments": "shipments"},
    "flink",
    steps=data.OVERDUE_STEPS,
    event_time="order_time",
)


def test_overdue_shipments_interval_join_and_window(odf: Odf) -> None:
    odf.add(ORDERS, SHIPMENTS, OVERDUE)
    overdue = "com.acme.shipments.overdue"

    def live() -> list[tuple[Any, ...]]:
        recs = odf.records(overdue)
        folded = fold(recs, ["order_time", "order_id", "order_quantity", "shipped_quantity_total",
                             "num_shipments", "first_shipment", "last_shipment"])  # fmt: skip
        return sorted(folded.elements())

    # Batch 1: orders 1, 2 and their shipments. Output watermark = min(Jan 1, Jan 2), held
    # back 2 days by the interval join: no day window is complete yet.
    odf.ingest("com.acme.orders", data.ORDERS[:2])
    odf.ingest("com.acme.shipments", data.SHIPMENTS[:3])
    odf.pull(overdue)
    assert live() == []
    # Batch 2: orders 3, 4, shipments up to Jan 11. Watermark min(Jan 10, Jan 11) - 2 days
    # = Jan 8 closes the windows of orders 1-3: only order 3 (nothing shipped within two
    # days) is overdue; orders 1 and 2 were shipped in full.
    odf.ingest("com.acme.orders", data.ORDERS[2:])
    odf.ingest("com.acme.shipments", data.SHIPMENTS[3:5])
    odf.pull(overdue)
    order3 = ("2020-01-05T00:00:00Z", 3, 9, 0, 1, None, None)
    assert live() == [order3]
    # Batch 3: the late shipment of order 4; the orders' watermark still holds order 4 back.
    odf.ingest("com.acme.shipments", data.SHIPMENTS[5:])
    odf.pull(overdue)
    assert live() == [order3]
    # The orders' watermark moves to Jan 13: Jan 11 closes order 4's window; only the
    # Jan 11 shipment (50 of 110) is within its two days.
    odf.run("pull", "com.acme.orders", "--set-watermark", "2020-01-13T00:00:00Z")
    odf.pull(overdue)
    order4 = ("2020-01-10T00:00:00Z", 4, 110, 50, 1, "2020-01-11T00:00:00Z",
              "2020-01-11T00:00:00Z")  # fmt: skip
    assert live() == [order3, order4]
    recs = odf.records(overdue)
    assert [r["op"] for r in recs] == [0, 0], "complete windows are emitted once, never retracted"
    assert not any(k.startswith("__odf") for k in recs[0])
    odf.verify(overdue)

"""Manifests, generated data and plain-Python reference answers for the streaming examples.

Used by `tests.node.test_streaming_examples`. The pipelines have the shape of kamu's
example pipelines (leaderboard, trading, currency conversion, overdue shipments), but the
manifests and the data are written here. Every expected result is computed independently
of Spark: running sums and as-of joins in a few lines of Python over the same rows.

Prices and rates are multiples of 1/4 so every sum and product is exact in binary
floating point: Spark and Python must agree bit for bit.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Row = dict[str, Any]

#: ``op`` values (ODF): append, retract, correct-from (-U), correct-to (+U).
OP_APPEND, OP_RETRACT, OP_CORRECT_FROM, OP_CORRECT_TO = 0, 1, 2, 3


def ts(day: dt.date | dt.datetime) -> str:
    """RFC 3339 UTC text (to the second) of a date (midnight) or a UTC datetime."""
    if not isinstance(day, dt.datetime):
        day = dt.datetime(day.year, day.month, day.day)
    if day.tzinfo is not None:
        day = day.astimezone(dt.UTC)
    return day.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_ts(text: str | None) -> dt.datetime | None:
    """A timestamp from ``odf export`` (RFC 3339, ``Z``) as an aware datetime."""
    return None if text is None else dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


# -- manifests ---------------------------------------------------------------------------------


def root_manifest(
    name: str, ddl: Sequence[str], primary_key: Sequence[str], event_time: str = "event_time"
) -> str:
    """A root dataset pushed as NdJson, merged as a ledger."""
    cols = "".join(f"      - {c}\n" for c in ddl)
    keys = ", ".join(primary_key)
    return f"""kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Root
  metadata:
  - kind: AddPushSource
    sourceName: default
    read:
      kind: NdJson
      ddlSchema:
{cols}    merge:
      kind: Ledger
      primaryKey: [{keys}]
  - kind: SetVocab
    eventTimeColumn: {event_time}
"""


def derivative_manifest(
    name: str,
    inputs: Mapping[str, str],
    engine: str,
    *,
    query: str | None = None,
    steps: Sequence[tuple[str | None, str]] = (),
    temporal_tables: Sequence[tuple[str, Sequence[str]]] = (),
    event_time: str | None = None,
) -> str:
    """A derivative dataset: inputs ``{dataset: alias}``, one query or aliased steps."""

    def block(text: str, indent: int) -> str:
        pad = " " * indent
        return "".join(f"{pad}{line}\n" for line in text.strip().splitlines())

    ins = "".join(f"    - datasetRef: {ds}\n      alias: {alias}\n" for ds, alias in inputs.items())
    body = ""
    if query is not None:
        body += "      query: |\n" + block(query, 8)
    if steps:
        body += "      queries:\n"
        for alias, sql in steps:
            body += f"      - alias: {alias}\n" if alias else "      - "
            body += ("        query: |\n" if alias else "query: |\n") + block(sql, 10)
    if temporal_tables:
        body += "      temporalTables:\n"
        for table, keys in temporal_tables:
            body += f"      - name: {table}\n        primaryKey: [{', '.join(keys)}]\n"
    vocab = f"  - kind: SetVocab\n    eventTimeColumn: {event_time}\n" if event_time else ""
    return f"""kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Derivative
  metadata:
  - kind: SetTransform
    inputs:
{ins}    transform:
      kind: Sql
      engine: {engine}
{body}{vocab}"""


# -- changelog folding -------------------------------------------------------------------------


def fold(records: Iterable[Row], columns: Sequence[str]) -> Counter[tuple[Any, ...]]:
    """The multiset a changelog stands for: appends and +U added, retractions and -U removed.

    Raises:
        AssertionError: a retraction of a row that is not live (a broken changelog).
    """
    live: Counter[tuple[Any, ...]] = Counter()
    for r in records:
        key = tuple(r[c] for c in columns)
        if r["op"] in (OP_APPEND, OP_CORRECT_TO):
            live[key] += 1
        else:
            assert live[key] > 0, f"retraction of a row that is not live: {r}"
            live[key] -= 1
    return +live


def as_multiset(rows: Iterable[Row], columns: Sequence[str]) -> Counter[tuple[Any, ...]]:
    """Reference rows as the multiset `fold` returns."""
    return Counter(tuple(r[c] for c in columns) for r in rows)


# -- leaderboard -------------------------------------------------------------------------------

LEADERBOARD_QUERY = """
select * from (
  select
    row_number() over (partition by 1 order by score desc) as place,
    match_time, match_id, player_id, score
  from player_scores
) where place <= 2
"""

#: Three matches, one per day, one batch each.
PLAYER_SCORE_BATCHES: list[list[Row]] = [
    [
        {"match_time": ts(dt.date(2000, 1, day)), "match_id": day, "player_id": p, "score": s}
        for p, s in players
    ]
    for day, players in (
        (1, (("Alice", 100), ("Bob", 80))),
        (2, (("Alice", 70), ("Charlie", 90))),
        (3, (("Bob", 60), ("Charlie", 110))),
    )
]

#: kamu's expectation for the example: (offset, op, place, player, score).
LEADERBOARD_EXPECTED = [
    (0, 0, 1, "Alice", 100),
    (1, 0, 2, "Bob", 80),
    (2, 1, 2, "Bob", 80),
    (3, 0, 2, "Charlie", 90),
    (4, 1, 1, "Alice", 100),
    (5, 1, 2, "Charlie", 90),
    (6, 0, 1, "Charlie", 110),
    (7, 0, 2, "Alice", 100),
]


# -- trading -----------------------------------------------------------------------------------

SYMBOLS = ("AAA", "BBB")
TICKERS_START = dt.date(2020, 1, 1)
TICKERS_DAYS = 91  # 2020-01-01 .. 2020-03-31


def tickers() -> list[Row]:
    """Daily closes of two symbols for three months (prices are multiples of 1/4)."""
    rows = []
    for d in range(TICKERS_DAYS):
        day = TICKERS_START + dt.timedelta(days=d)
        for i, sym in enumerate(SYMBOLS):
            close = 100.0 + 50 * i + ((d * 7 + i * 3) % 40) * 0.25
            rows.append(
                {"event_time": ts(day), "symbol": sym, "close": close, "close_adj": close - 0.5}
            )
    return rows


def transactions() -> list[Row]:
    """About monthly buys and sells, ending in mid February (before the tickers end)."""
    spec = [
        (dt.date(2020, 1, 3), "AAA", 10, 101.25),
        (dt.date(2020, 1, 10), "BBB", 20, 151.5),
        (dt.date(2020, 1, 24), "AAA", 5, 103.75),
        (dt.date(2020, 2, 4), "BBB", -8, 155.0),
        (dt.date(2020, 2, 7), "AAA", -12, 104.5),
        (dt.date(2020, 2, 14), "BBB", 4, 152.25),
    ]
    return [
        {
            "event_time": ts(day),
            "symbol": sym,
            "quantity": qty,
            "price": price,
            "settlement": -qty * price,
        }
        for day, sym, qty, price in spec
    ]


def split_by_time(rows: Sequence[Row], column: str, cuts: Sequence[str]) -> list[list[Row]]:
    """``rows`` in ``len(cuts) + 1`` batches: event time < cut[0], < cut[1], ..., the rest."""
    batches: list[list[Row]] = [[] for _ in range(len(cuts) + 1)]
    for r in rows:
        batches[sum(1 for c in cuts if r[column] >= c)].append(r)
    return batches


HOLDINGS_QUERY = """
SELECT
  event_time, symbol, quantity, price, settlement,
  sum(quantity) over(partition by symbol order by event_time rows unbounded preceding)
    as cum_quantity,
  sum(settlement) over(partition by symbol order by event_time rows unbounded preceding)
    as cum_balance
FROM `my.trading.transactions`
"""

MARKET_VALUE_QUERY = """
SELECT
  tickers.`event_time`,
  holdings.`symbol`,
  holdings.`cum_quantity`,
  holdings.`quantity` as `quantity`,
  tickers.`close_adj` * holdings.`cum_quantity` as `market_value`
FROM `com.yahoo.finance.tickers.daily` as tickers
JOIN `my.trading.holdings` FOR SYSTEM_TIME AS OF tickers.`event_time` AS holdings
ON tickers.`symbol` = holdings.`symbol`
"""


def holdings_reference(txs: Sequence[Row]) -> list[Row]:
    """Running quantity and balance per symbol, in event-time order."""
    out = []
    qty: dict[str, int] = {}
    bal: dict[str, float] = {}
    for t in sorted(txs, key=lambda r: r["event_time"]):
        s = t["symbol"]
        qty[s] = qty.get(s, 0) + t["quantity"]
        bal[s] = bal.get(s, 0.0) + t["settlement"]
        out.append({**t, "cum_quantity": qty[s], "cum_balance": bal[s]})
    return out


def as_of(versions: Sequence[Row], key: str, value: Any, time_col: str, t: str) -> Row | None:
    """The latest row of ``versions`` with ``key == value`` and ``time_col <= t``."""
    best = None
    for v in versions:
        if v[key] == value and v[time_col] <= t and (best is None or v[time_col] >= best[time_col]):
            best = v
    return best


def market_value_reference(ticks: Sequence[Row], holdings: Sequence[Row], until: str) -> list[Row]:
    """Inner as-of join of tickers with holdings, for ticker rows up to ``until``."""
    out = []
    for t in ticks:
        if t["event_time"] > until:
            continue
        h = as_of(holdings, "symbol", t["symbol"], "event_time", t["event_time"])
        if h is not None:
            out.append(
                {
                    "event_time": t["event_time"],
                    "symbol": h["symbol"],
                    "cum_quantity": h["cum_quantity"],
                    "quantity": h["quantity"],
                    "market_value": t["close_adj"] * h["cum_quantity"],
                }
            )
    return out


# -- currency conversion -----------------------------------------------------------------------


def rates() -> list[Row]:
    """Daily CAD->USD and EUR->USD rates from 2020-01-03 (EUR from 2020-01-06), 10 days."""
    rows = []
    for d in range(10):
        day = dt.date(2020, 1, 3) + dt.timedelta(days=d)
        rows.append(
            {"date": ts(day), "currency_base": "CAD", "currency_target": "USD",
             "rate": 0.75 + (d % 3) * 0.0625}
        )  # fmt: skip
        if day >= dt.date(2020, 1, 6):
            rows.append(
                {"date": ts(day), "currency_base": "EUR", "currency_target": "USD",
                 "rate": 1.125 + (d % 2) * 0.125}
            )  # fmt: skip
    return rows


def account_transactions() -> list[Row]:
    """Card transactions in CAD and EUR, some before the first rate of their currency."""
    spec = [
        (dt.datetime(2020, 1, 1, 10), "coffee", "CAD", 4.0),
        (dt.datetime(2020, 1, 2, 12), "books", "EUR", 32.0),
        (dt.datetime(2020, 1, 3, 9), "lunch", "CAD", 16.0),
        (dt.datetime(2020, 1, 4, 18), "train", "EUR", 48.0),
        (dt.datetime(2020, 1, 6, 8), "hotel", "EUR", 256.0),
        (dt.datetime(2020, 1, 7, 20), "dinner", "CAD", 64.0),
        (dt.datetime(2020, 1, 9, 11), "museum", "EUR", 20.0),
        (dt.datetime(2020, 1, 11, 15), "taxi", "CAD", 28.0),
    ]
    return [
        {"event_time": ts(t), "description": what, "currency": cur, "amount": amount}
        for t, what, cur, amount in spec
    ]


CONVERSION_QUERY = """
SELECT
  tr.event_time,
  tr.description,
  tr.currency as currency_orig,
  tr.amount as amount_orig,
  rates.currency_target as currency,
  tr.amount * rates.rate as amount
FROM transactions as tr
LEFT JOIN rates FOR SYSTEM_TIME AS OF tr.event_time AS rates
ON tr.currency = rates.currency_base
"""


def conversion_reference(txs: Sequence[Row], rate_rows: Sequence[Row], until: str) -> list[Row]:
    """Left as-of join: every transaction up to ``until``, NULLs before its first rate."""
    out = []
    for t in txs:
        if t["event_time"] > until:
            continue
        r = as_of(rate_rows, "currency_base", t["currency"], "date", t["event_time"])
        out.append(
            {
                "event_time": t["event_time"],
                "description": t["description"],
                "currency_orig": t["currency"],
                "amount_orig": t["amount"],
                "currency": None if r is None else r["currency_target"],
                "amount": None if r is None else t["amount"] * r["rate"],
            }
        )
    return out


# -- overdue shipments -------------------------------------------------------------------------

ORDERS = [
    {"event_time": ts(dt.date(2020, 1, d)), "order_id": oid, "quantity": q}
    for d, oid, q in ((1, 1, 10), (1, 2, 120), (5, 3, 9), (10, 4, 110))
]
SHIPMENTS = [
    {"event_time": ts(dt.date(2020, 1, d)), "shipment_id": sid, "order_id": oid, "quantity": q}
    for d, sid, oid, q in (
        (1, 1, 1, 4),
        (2, 2, 1, 6),
        (2, 3, 2, 120),
        (8, 4, 3, 9),
        (11, 5, 4, 50),
        (13, 6, 4, 6),
    )
]

OVERDUE_STEPS: list[tuple[str | None, str]] = [
    (
        "order_shipments",
        """
SELECT
  o.event_time as order_time,
  o.order_id,
  o.quantity as order_quantity,
  CAST(s.event_time as TIMESTAMP(3)) as shipped_time,
  COALESCE(s.quantity, 0) as shipped_quantity
FROM orders as o
LEFT JOIN shipments as s
ON
  o.order_id = s.order_id
  AND s.event_time BETWEEN o.event_time AND o.event_time + INTERVAL '2' DAY
""",
    ),
    (
        "order_shipments_agg",
        """
SELECT
  TUMBLE_START(order_time, INTERVAL '1' DAY) as order_time,
  order_id,
  count(*) as num_shipments,
  min(shipped_time) as first_shipment,
  max(shipped_time) as last_shipment,
  max(order_quantity) as order_quantity,
  sum(shipped_quantity) as shipped_quantity_total
FROM order_shipments
GROUP BY TUMBLE(order_time, INTERVAL '1' DAY), order_id
""",
    ),
    (None, "SELECT * FROM order_shipments_agg WHERE order_quantity <> shipped_quantity_total"),
]
